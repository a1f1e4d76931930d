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

from vcpulab.sim._base import _NEW, _Base, _bool, _choice, _float, _instance, _int, _plain_seq

DISTS = ("fixed", "exp", "uniform")
LOCK_KINDS = ("tas", "ticket", "queued", "pv_queued", "mutex", "rwsem_read", "rwsem_write")


def _phase_common(obj: Any) -> None:
    _float(obj, "prob")


@dataclass(frozen=True)
class Compute(_Base):
    """Useful work.

    Attributes:
        ns: mean duration, ns (required).
        dist: ``"fixed"`` (default), ``"exp"`` or ``"uniform"`` (on [ns/2, 3ns/2]).
        mode: ``"user"`` (default) or ``"kernel"``: the CPL, recorded as
            preempted_in_kernel if the vCPU is preempted meanwhile.
        prob: probability that the phase runs in an iteration. Default 1.0.
    """

    kind: ClassVar[str] = "compute"
    ns: int
    dist: str = "fixed"
    mode: str = "user"
    prob: float = 1.0

    def __post_init__(self) -> None:
        _int(self, "ns")
        _choice(self, "dist")
        _choice(self, "mode")
        _phase_common(self)


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
    the first sleeper — a writer alone, or every waiting reader). Simplified:
    no lock stealing for queued kinds; the PV predecessor check happens when a
    waiter (re)starts spinning; nobody spins on a reader-owned semaphore.

    Attributes:
        lock: lock id within the VM, 0..1023. Default 0.
        lock_kind: see above. Default ``"ticket"``.
        hold_ns: mean hold time, ns. Default 1000.
        dist: distribution of the hold time. Default ``"fixed"``.
        prob: probability that the phase runs. Default 1.0.
    """

    kind: ClassVar[str] = "lock"
    lock: int = 0
    lock_kind: str = "ticket"
    hold_ns: int = 1000
    dist: str = "fixed"
    prob: float = 1.0

    def __post_init__(self) -> None:
        _int(self, "lock")
        _choice(self, "lock_kind")
        _int(self, "hold_ns")
        _choice(self, "dist")
        _phase_common(self)


@dataclass(frozen=True)
class Ipi(_Base):
    """Send a call-function IPI (TLB shootdown / smp_call_function) to
    ``targets`` random other vCPUs (0 = all others) and spin until each has
    run its ``handler_ns`` handler (ns, default 1000; the VM's first Ipi
    phase sets the handler length for all). ``targets`` default 0 (all
    others); ``prob`` default 1.0. ``tlb_flush``: the IPI is a TLB
    shootdown (``flush_tlb_multi``), which PV TLB flush (``Pv.tlb_flush``)
    skips for preempted targets; default False."""

    kind: ClassVar[str] = "ipi"
    targets: int = 0
    handler_ns: int = 1000
    prob: float = 1.0
    tlb_flush: bool = False

    def __post_init__(self) -> None:
        _bool(self, "tlb_flush")
        _int(self, "targets")
        _int(self, "handler_ns")
        _phase_common(self)


@dataclass(frozen=True)
class Barrier(_Base):
    """Block until every (unfinished) thread of the VM arrives (pthread/futex
    barrier: waiters sleep; the vCPU halts if it has nothing else).
    ``prob`` must be 1.0 (a skipped barrier deadlocks)."""

    kind: ClassVar[str] = "barrier"
    prob: float = 1.0

    def __post_init__(self) -> None:
        if self.prob != 1.0:
            raise ValueError(f"Barrier.prob must be 1.0 (a skipped barrier deadlocks), got {self.prob}")
        _phase_common(self)


@dataclass(frozen=True)
class Sleep(_Base):
    """Block until a timer (I/O, timed waits): ``ns`` mean, ns (default
    100000); ``dist`` default ``"fixed"``; ``prob`` default 1.0.

    ``periodic``: if True, wake at the next multiple of ``ns`` since the run's
    start instead (a periodic timer such as the LAPIC's: a late wake-up does
    not shift the later ones, and periods that pass while the thread is not
    waiting are skipped, like coalesced timer interrupts); needs ``ns > 0``
    and ``dist="fixed"``. Default False (left out of the JSON when False, so
    existing configurations keep their hash)."""

    kind: ClassVar[str] = "sleep"
    ns: int = 100_000
    dist: str = "fixed"
    prob: float = 1.0
    periodic: bool = False

    def __post_init__(self) -> None:
        _int(self, "ns")
        _choice(self, "dist")
        _phase_common(self)
        _bool(self, "periodic")
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
    waking it if it waits in Recv; ``prob`` default 1.0."""

    kind: ClassVar[str] = "send"
    to: int = 1
    prob: float = 1.0

    def __post_init__(self) -> None:
        _int(self, "to")
        _phase_common(self)


@dataclass(frozen=True)
class Recv(_Base):
    """Block until a message is available (halt until a message); ``prob``
    default 1.0."""

    kind: ClassVar[str] = "recv"
    prob: float = 1.0

    def __post_init__(self) -> None:
        _phase_common(self)


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
        tasks: tasks per frame, all threads together (1..1e6; required).
        frames: frames; 0 (default) = until the end of the run.
        prob: must be 1.0.
    """

    kind: ClassVar[str] = "task_queue"
    tasks: int
    frames: int = 0
    prob: float = 1.0

    def __post_init__(self) -> None:
        _int(self, "tasks")
        _int(self, "frames")
        if self.prob != 1.0:
            raise ValueError(f"TaskQueue.prob must be 1.0 (a skipped take loses the frame's end), got {self.prob}")
        _phase_common(self)


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
        phases: a tuple of phases (Compute, Lock, Ipi, Barrier, Sleep, Send, Recv, TaskQueue).
        name: a label for tables. Default ``"custom"``.
        iterations: iterations per thread; 0 loops until the end of the run
            (throughput), > 0 ends the run when every VM is done (wall time).
        guest_slice_ns: guest round-robin slice between threads sharing a
            vCPU, ns. Default 4000000 (assumption: a 4 ms guest CFS slice).
        spin_iter_cycles: cycles per spin-loop iteration (turns SPIN_THRESHOLD
            into time). Default 40 (assumption: PAUSE + load on older Xeons).
        spin_threshold: PV queued-lock SPIN_THRESHOLD, iterations. Default
            32768 (kernel, [K5]).
        thread0_phases: what thread 0 of each VM runs instead of ``phases``
            (an initiator beside responders, e.g. a ping-pong: thread 0
            ``(Compute, Send(1), Recv())``, the others ``(Recv(), Compute,
            Send(1))``); only Compute, Sleep, Barrier, Send and Recv phases,
            and the VM needs >= 2 threads. Default ``()``: every thread runs
            ``phases``.
        thread0_bound: thread 0 of each VM is bound to the VM's vCPU 0 (the
            guest's ``kthread_bind`` / ``sched_setaffinity`` to one CPU): its
            wake-ups skip the guest's placement and load balancing never
            moves it; other threads are placed as before. Default False. A
            waker that stays on its vCPU, as the vCPU 0 of
            [`WakePlacement`][vcpulab.experiment.WakePlacement].
    """

    phases: tuple[Any, ...] = (Compute(20_000, dist="exp"), Lock(0, "ticket", 2_000))
    name: str = "custom"
    iterations: int = 0
    guest_slice_ns: int = 4_000_000
    spin_iter_cycles: int = 40
    spin_threshold: int = 32768
    thread0_phases: tuple[Any, ...] = field(default=(), metadata=_NEW)
    thread0_bound: bool = field(default=False, metadata=_NEW)

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
        if len(self.thread0_phases) > 256:
            raise ValueError(f"Workload.thread0_phases must hold <= 256 phases, got {len(self.thread0_phases)}")
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
        if len(self.phases) > 256:
            raise ValueError(f"Workload.phases must hold <= 256 phases, got {len(self.phases)}")
        kinds: dict[int, str] = {}
        for i, p in enumerate(self.phases):
            if isinstance(p, Lock):
                first = kinds.setdefault(p.lock, p.lock_kind)
                if first != p.lock_kind and not (first.startswith("rwsem") and p.lock_kind.startswith("rwsem")):
                    raise ValueError(
                        f"Workload.phases[{i}].lock_kind differs from an earlier phase using lock {p.lock}"
                    )
        if any(isinstance(p, Recv) for p in self.phases) and not any(isinstance(p, Send) for p in self.phases):
            raise ValueError("Workload.phases: a Recv phase needs a Send phase")
        _instance(self, "name", str)
        _int(self, "iterations")
        queues = sum(isinstance(p, TaskQueue) for p in self.phases)
        if queues and (
            queues > 1 or any(isinstance(p, Barrier) for p in self.phases) or self.thread0_phases or self.iterations
        ):
            raise ValueError(
                "Workload.phases: a task_queue phase must be the only one, with no barrier phase, no thread0_phases "
                "and iterations 0 (its frames end the run)"
            )
        _int(self, "guest_slice_ns")
        _int(self, "spin_iter_cycles")
        _int(self, "spin_threshold")
        _bool(self, "thread0_bound")

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
