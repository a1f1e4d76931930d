"""Configuration objects of the simulator.

Every object is a frozen dataclass that validates itself in ``__post_init__``
(a bad value raises :class:`ValueError` naming the field, e.g.
``"Host.pcpus must be >= 1, got 0"``), converts to and from a plain dict
(``to_dict`` / ``from_dict``) and crosses into Rust as JSON. The Rust side
validates again. Configurations are hashable, picklable and
JSON-round-trippable; :meth:`Config.config_hash` names a point stably.

Sources quoted in the docstrings: *kernel* = the upstream default named;
*digest* = ``seeds-digest.md``; *spec §n* = ``kvm-mechanisms.md``;
*assumption* = a value chosen by vcpulab where no measurement is at hand
(change it to your hardware's).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "Background",
    "Barrier",
    "Compute",
    "Config",
    "HaltPoll",
    "Host",
    "Ipi",
    "Lock",
    "Phase",
    "Ple",
    "Policy",
    "Pv",
    "Recv",
    "Send",
    "Sleep",
    "Vm",
    "Workload",
]

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


# ----------------------------------------------------------------- validation


def _int(obj: Any, name: str, lo: int = 0, hi: int = U64_MAX) -> None:
    v = getattr(obj, name)
    cls = type(obj).__name__
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{cls}.{name} must be an int, got {v!r}")
    if v < lo:
        raise ValueError(f"{cls}.{name} must be >= {lo}, got {v}")
    if v > hi:
        raise ValueError(f"{cls}.{name} must be <= {hi}, got {v}")


def _float(obj: Any, name: str, lo: float, hi: float, hi_open: bool = False) -> None:
    v = getattr(obj, name)
    cls = type(obj).__name__
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{cls}.{name} must be a finite number, got {v!r}")
    if v < lo or v > hi or (hi_open and v >= hi):
        bracket = ")" if hi_open else "]"
        raise ValueError(f"{cls}.{name} must be in [{lo}, {hi}{bracket}, got {v}")


def _bool(obj: Any, name: str) -> None:
    v = getattr(obj, name)
    if not isinstance(v, bool):
        raise ValueError(f"{type(obj).__name__}.{name} must be a bool, got {v!r}")


def _choice(obj: Any, name: str, choices: Sequence[str]) -> None:
    v = getattr(obj, name)
    if v not in choices:
        raise ValueError(f"{type(obj).__name__}.{name} must be one of {', '.join(map(repr, choices))}, got {v!r}")


def _instance(obj: Any, name: str, typ: type) -> None:
    v = getattr(obj, name)
    if not isinstance(v, typ):
        raise ValueError(f"{type(obj).__name__}.{name} must be a {typ.__name__}, got {v!r}")


class _Base:
    """to_dict / from_dict for the config dataclasses."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if not f.metadata.get("serialise", True):
                continue
            out[f.name] = _to_plain(getattr(self, f.name))
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Any:
        if not isinstance(d, Mapping):
            raise ValueError(f"{cls.__name__}.from_dict needs a mapping, got {d!r}")
        names = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(d) - set(names)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
        kw = {k: cls._field_from_plain(k, v) for k, v in d.items()}
        return cls(**kw)

    @classmethod
    def _field_from_plain(cls, name: str, v: Any) -> Any:
        return v


def _to_plain(v: Any) -> Any:
    if isinstance(v, _Base):
        return v.to_dict()
    if isinstance(v, (tuple, list)):
        return [_to_plain(x) for x in v]
    return v


# ------------------------------------------------------------------------ host


@dataclass(frozen=True)
class Background(_Base):
    """Background host load: one pinned host task per host CPU (kworker-like).

    Attributes:
        utilization: fraction of its CPU each background task wants, in [0, 1).
            Default 0.0 (idle host). Source: assumption.
        burst_ns: mean length of one burst, ns (exponential). Default 200000.
            Source: assumption.
        weight: scheduler weight of each background task, in [2, 88761]
            (the kernel's nice-to-weight table: 1024 = nice 0, 88761 = nice
            -20, 15 = nice 19). Default 1024.
    """

    utilization: float = 0.0
    burst_ns: int = 200_000
    weight: int = 1024

    def __post_init__(self) -> None:
        _float(self, "utilization", 0.0, 1.0, hi_open=True)
        _int(self, "burst_ns", 1000)
        _int(self, "weight", 2, 88761)


@dataclass(frozen=True)
class Host(_Base):
    """The host: CPUs and scheduler.

    Attributes:
        pcpus: host CPUs. Default 4.
        scheduler: ``"fair"`` (CFS/EEVDF-like, one run queue per CPU) or
            ``"gang"`` (all vCPUs of a VM run together in slices of
            ``gang_slice_ns``; digest §4). Default ``"fair"``.
        tick_ns: scheduler tick period, ns. Default 4000000 (HZ=250, the
            kernel's Kconfig default). Slice expiry is noticed at ticks.
        base_slice_ns: EEVDF base slice, ns. Default 3000000 (kernel:
            sysctl_sched_base_slice 0.75 ms × (1 + ilog2(min(ncpus, 8))) = 3 ms).
        wakeup_preemption: a woken, eligible task with an earlier deadline
            preempts curr. Default True (kernel). Simplified: no RUN_TO_PARITY.
        next_buddy: effect of yield_to's next-buddy hint: ``"always"`` (CFS
            before v6.6), ``"eligible"`` (PICK_BUDDY, ~v6.12+; default) or
            ``"never"`` (v6.6-~6.11). Spec §1.5.
        yield_penalty: ``"vruntime"`` (newer EEVDF: an eligible yielder's
            vruntime jumps to its deadline, deadline += slice; default) or
            ``"deadline"`` (v6.6: deadline += slice). Spec §1.5.
        affinity: vCPU threads ``"pinned"`` one per CPU slot in a seeded,
            balanced random order (default), ``"round_robin"`` (vCPU g on CPU
            g mod P), or ``"all"`` (unpinned: placed at wake-up on the previous
            CPU if idle, else the first idle one; pulled by a CPU about to go
            idle). No periodic load balancing.
        gang_slice_ns: gang-scheduling slice, ns. Default 4000000 (digest §4:
            "clean 4 ms slices").
        tsc_khz: host clock converting PLE cycles to ns, kHz. Default 2100000
            (2.1 GHz, a Xeon of the digest's era; assumption).
        rq_lock_ns: time a yield_to attempt holds both run-queue locks, ns
            (contended locks are waited for). Default 300 (assumption; digest
            §1: ~50 % host time in _raw_spin_lock under PLE storms).
        yield_check_ns: cost of yield_to before the locks (the -ESRCH check),
            ns. Default 50 (assumption).
        yield_to_esrch: yield_to returns -ESRCH at once when both run queues
            hold a single task (kernels since ~3.8). False models the 2011-2012
            yield_to, which always took both run-queue locks. Default True.
        background: optional background host load. Default: none.
    """

    pcpus: int = 4
    scheduler: str = "fair"
    tick_ns: int = 4_000_000
    base_slice_ns: int = 3_000_000
    wakeup_preemption: bool = True
    next_buddy: str = "eligible"
    yield_penalty: str = "vruntime"
    affinity: str = "pinned"
    gang_slice_ns: int = 4_000_000
    tsc_khz: int = 2_100_000
    rq_lock_ns: int = 300
    yield_check_ns: int = 50
    yield_to_esrch: bool = True
    background: Background = field(default_factory=Background)

    def __post_init__(self) -> None:
        _int(self, "pcpus", 1, 4096)
        _choice(self, "scheduler", ("fair", "gang"))
        _int(self, "tick_ns", 1000)
        _int(self, "base_slice_ns", 1000)
        _bool(self, "wakeup_preemption")
        _choice(self, "next_buddy", ("always", "eligible", "never"))
        _choice(self, "yield_penalty", ("vruntime", "deadline"))
        _choice(self, "affinity", ("pinned", "round_robin", "all"))
        _int(self, "gang_slice_ns", 1000)
        _int(self, "tsc_khz", 1000)
        _int(self, "rq_lock_ns", 0, 10**9)
        _int(self, "yield_check_ns", 0, 10**9)
        _bool(self, "yield_to_esrch")
        _instance(self, "background", Background)

    @classmethod
    def _field_from_plain(cls, name: str, v: Any) -> Any:
        return Background.from_dict(v) if name == "background" else v


# ------------------------------------------------------------------------- PLE


@dataclass(frozen=True)
class Ple(_Base):
    """Pause-loop exiting (VMX) / pause filter (SVM), spec §2.

    A vCPU spinning in guest kernel mode (any mode for SVM) exits after
    ``window`` cycles of continuous spinning, pays ``exit_ns``, grows its
    window (``__grow_ple_window``), runs the VM's directed-yield policy, and
    re-enters or yields. The window shrinks (default: resets) on sched-in.

    Simplifications: the SVM pause filter counts PAUSE *instructions* and
    reloads its count when more than ``pause_filter_thresh`` cycles pass
    between two PAUSEs (spec §2.3); here both kinds treat the window as
    cycles of continuous spinning (a filter count maps to cycles through the
    spinner's PAUSE rate), with no threshold. Guest spinning is modelled in
    kernel mode only (every lock kind is a kernel lock), so SVM's "any CPL"
    and VMX's "CPL 0 only" never differ here.

    Attributes:
        enabled: False models KVM_X86_DISABLE_EXITS_PAUSE (no exits). Default True.
        kind: ``"vmx"`` (default) or ``"svm"``.
        window: initial window and shrink floor, cycles. Default 4096 (kernel
            ``KVM_VMX_DEFAULT_PLE_WINDOW``; SVM: 3000).
        grow: grow modifier; < window multiplies, else adds; 0 keeps the window
            fixed (kernels before 2014). Default 2 (kernel).
        shrink: shrink modifier; 0 resets to ``window``. Default 0 (kernel).
        max: growth cap, cycles. Default 4294967295 (kernel UINT_MAX; SVM 65535).
        exit_ns: cost of one PAUSE exit round trip, ns. Default 1000 (assumption:
            ~1 µs VM exit + entry on recent Xeons).
        candidate_ns: cost of examining one candidate in kvm_vcpu_on_spin, ns.
            Default 40 (assumption).
    """

    enabled: bool = True
    kind: str = "vmx"
    window: int = 4096
    grow: int = 2
    shrink: int = 0
    max: int = U32_MAX
    exit_ns: int = 1000
    candidate_ns: int = 40

    def __post_init__(self) -> None:
        _bool(self, "enabled")
        _choice(self, "kind", ("vmx", "svm"))
        _int(self, "window", 1, U32_MAX)
        _int(self, "grow", 0, U32_MAX)
        _int(self, "shrink", 0, U32_MAX)
        _int(self, "max", 1, U32_MAX)
        if self.max < self.window:
            raise ValueError(f"Ple.max must be >= Ple.window ({self.window}), got {self.max}")
        _int(self, "exit_ns", 0, 10**9)
        _int(self, "candidate_ns", 0, 10**6)

    @classmethod
    def vmx(cls, **kw: Any) -> Ple:
        """Intel defaults: 4096 cycles, ×2, reset on sched-in, cap UINT_MAX."""
        return cls(**kw)

    @classmethod
    def svm(cls, **kw: Any) -> Ple:
        """AMD pause-filter defaults: 3000, ×2, reset on sched-in, cap 65535."""
        return cls(**{"kind": "svm", "window": 3000, "max": 65535, **kw})

    @classmethod
    def fixed(cls, **kw: Any) -> Ple:
        """A fixed 4096-cycle window, as in the 2011-2013 kernels (no grow/shrink)."""
        return cls(**{"grow": 0, **kw})

    @classmethod
    def off(cls) -> Ple:
        """PAUSE exits disabled (KVM_X86_DISABLE_EXITS_PAUSE)."""
        return cls(enabled=False)


# ---------------------------------------------------------------------- policy

POLICY_KINDS = ("none", "baseline2011", "dy_eligible", "upstream", "random", "oracle", "python")


@dataclass(frozen=True)
class Policy(_Base):
    """A VM's directed-yield policy (what kvm_vcpu_on_spin does), spec §1.

    Use the constructors in :mod:`vcpulab.sim.policies` rather than this class.

    Attributes:
        kind: ``"upstream"`` (default; spec §1.3), ``"baseline2011"``,
            ``"dy_eligible"`` (digest §1), ``"random"``, ``"oracle"``,
            ``"none"`` or ``"python"``.
        esrch_budget: -ESRCH results tolerated before the scan stops; 0 =
            unlimited. Default 3 (kernel). ``dy_eligible`` uses 0 (the 2012 patch).
        last_boosted_bug: upstream: store the loop offset instead of the index
            (v6.12-6.18 bug). Default False.
        dy_eligible: upstream: apply the dy_eligible toggle. Default True (x86).
        kernel_filter: upstream: skip candidates preempted in guest user mode
            when the spinner is in kernel mode. Default True (since ~v4.14).
        name: Python policies: the callable's name (the key it travels under).
        fn: Python policies: ``fn(spinner, candidates) -> int | None``; not
            serialised, travels beside the JSON.
    """

    kind: str = "upstream"
    esrch_budget: int = 3
    last_boosted_bug: bool = False
    dy_eligible: bool = True
    kernel_filter: bool = True
    name: str = ""
    fn: Callable[..., Any] | None = field(default=None, compare=False, hash=False, metadata={"serialise": False})

    def __post_init__(self) -> None:
        _choice(self, "kind", POLICY_KINDS)
        _int(self, "esrch_budget", 0, U32_MAX)
        _bool(self, "last_boosted_bug")
        _bool(self, "dy_eligible")
        _bool(self, "kernel_filter")
        _instance(self, "name", str)
        if self.kind == "python":
            if self.fn is not None and not callable(self.fn):
                raise ValueError(f"Policy.fn must be callable, got {self.fn!r}")
            if not self.name:
                raise ValueError("Policy.name must name the Python policy")

    @property
    def label(self) -> str:
        """A short name for tables: the kind, or ``python:<name>``."""
        return f"python:{self.name}" if self.kind == "python" else self.kind


# -------------------------------------------------------------------------- pv

@dataclass(frozen=True)
class Pv(_Base):
    """Paravirtual features of a VM and exit costs (digest §2-3, spec §4-5).

    Attributes:
        steal_time: steal time on: the guest sees the ``preempted`` byte (mutex
            spinners stop, wake-up placement avoids preempted vCPUs). Default True.
        sched_yield: PV_SCHED_YIELD: a call-function IPI sender directed-yields
            to the first preempted target. Default True.
        apicv: posted interrupts: a pending IPI makes a candidate dy_runnable.
            Default True.
        placement: guest wake-up placement: ``"available_idle"`` (upstream:
            idle and not preempted) or ``"pcpu_is_idle"`` (2021 proposal: first
            prefer idle vCPUs whose host CPU is idle, counting a preempted one
            as available). Default ``"available_idle"``.
        hypercall_ns: cost of a hypercall exit (KICK_CPU, SCHED_YIELD), ns.
            Default 1500 (assumption).
        halt_exit_ns: cost of a HLT exit before blocking, ns. Default 1500
            (assumption).
        guest_idle_poll_ns: guest idle polling before HLT (cpuidle-haltpoll),
            ns; 0 halts at once. Default 0 (haltpoll is off unless the guest
            loads it; its own default is 200000, spec §5.4).
    """

    steal_time: bool = True
    sched_yield: bool = True
    apicv: bool = True
    placement: str = "available_idle"
    hypercall_ns: int = 1500
    halt_exit_ns: int = 1500
    guest_idle_poll_ns: int = 0

    def __post_init__(self) -> None:
        _bool(self, "steal_time")
        _bool(self, "sched_yield")
        _bool(self, "apicv")
        _choice(self, "placement", ("available_idle", "pcpu_is_idle"))
        _int(self, "hypercall_ns", 0, 10**9)
        _int(self, "halt_exit_ns", 0, 10**9)
        _int(self, "guest_idle_poll_ns", 0, 10**9)


@dataclass(frozen=True)
class HaltPoll(_Base):
    """Host halt polling (spec §3): before a halting vCPU blocks, its thread
    polls for a wake-up while no other task wants the host CPU.

    Attributes:
        policy: ``"off"`` (block at once; default), ``"fixed"`` (always poll
            up to ``max_ns``, the Feb 2015 halt_poll_ns), ``"dynamic"``
            (upstream: the per-vCPU window grows when a halt was short and
            shrinks when it was longer than ``max_ns``, §3.2) or
            ``"dynamic_v4"`` (the 2015 v4 proposal, never merged: grow when
            the wake-up came while polling, shrink after an idle halt of
            more than 10 ms; vcpulab's reconstruction, see
            :mod:`vcpulab.sim.halt_poll`). The window and the stats come from
            the same per-vCPU state machine as :mod:`vcpulab.sim.halt_poll`.
        max_ns: halt_poll_ns (or the KVM_CAP_HALT_POLL value), ns. Default
            200000 (kernel x86 ``KVM_HALT_POLL_NS_DEFAULT``).
        grow: halt_poll_ns_grow. Default 2 (kernel).
        grow_start_ns: halt_poll_ns_grow_start, ns. Default 10000 (kernel).
        shrink: halt_poll_ns_shrink; 0 resets to 0. Default 2 (kernel ≥ ~6.8).
        poll_allowed: False when the guest turned host polling off by writing
            0 to ``MSR_KVM_POLL_CONTROL`` (its own cpuidle-haltpoll driver
            then polls instead, see ``Pv.guest_idle_poll_ns``). Default True.

    Results carry the kernel's stat names per vCPU: ``halt_attempted_poll``,
    ``halt_successful_poll``, ``halt_poll_invalid``, ``halt_poll_success_ns``,
    ``halt_poll_fail_ns``, ``halt_wait_ns``, ``halt_wakeup``; the time spent
    polling is the ``polling_ns`` category.
    """

    policy: str = "off"
    max_ns: int = 200_000
    grow: int = 2
    grow_start_ns: int = 10_000
    shrink: int = 2
    poll_allowed: bool = True

    def __post_init__(self) -> None:
        _choice(self, "policy", ("off", "fixed", "dynamic", "dynamic_v4"))
        _int(self, "max_ns", 0, U32_MAX)
        _int(self, "grow", 0, 1024)
        _int(self, "grow_start_ns", 0, U32_MAX)
        _int(self, "shrink", 0, 1024)
        _bool(self, "poll_allowed")


# ---------------------------------------------------------------------- phases

DISTS = ("fixed", "exp", "uniform")
LOCK_KINDS = ("tas", "ticket", "queued", "pv_queued", "mutex")


def _phase_common(obj: Any) -> None:
    _float(obj, "prob", 0.0, 1.0)


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
        _int(self, "ns", 0, 10**12)
        _choice(self, "dist", DISTS)
        _choice(self, "mode", ("user", "kernel"))
        _phase_common(self)


@dataclass(frozen=True)
class Lock(_Base):
    """Acquire guest lock ``lock``, hold it ``hold_ns`` (kernel mode), release.

    ``kind``: ``"tas"`` (virt_spin_lock test-and-set: a running spinner takes
    it at release), ``"ticket"`` (FIFO; the next ticket must run),
    ``"queued"`` (native qspinlock, MCS-like FIFO hand-off), ``"pv_queued"``
    (spin SPIN_THRESHOLD iterations, then halt until kicked; the kick
    directed-yields to the kicked vCPU, spec §5), ``"mutex"`` (optimistic
    spinning while the owner is on a CPU and, with steal time, not preempted;
    otherwise sleep). Simplified: no lock stealing for queued kinds; the PV
    predecessor check happens when a waiter (re)starts spinning.

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
        _int(self, "lock", 0, 1023)
        _choice(self, "lock_kind", LOCK_KINDS)
        _int(self, "hold_ns", 0, 10**9)
        _choice(self, "dist", DISTS)
        _phase_common(self)


@dataclass(frozen=True)
class Ipi(_Base):
    """Send a call-function IPI (TLB shootdown / smp_call_function) to
    ``targets`` random other vCPUs (0 = all others) and spin until each has
    run its ``handler_ns`` handler (ns, default 1000; the VM's first Ipi
    phase sets the handler length for all). ``targets`` default 0 (all
    others); ``prob`` default 1.0."""

    kind: ClassVar[str] = "ipi"
    targets: int = 0
    handler_ns: int = 1000
    prob: float = 1.0

    def __post_init__(self) -> None:
        _int(self, "targets", 0, 65535)
        _int(self, "handler_ns", 0, 10**9)
        _phase_common(self)


@dataclass(frozen=True)
class Barrier(_Base):
    """Block until every (unfinished) thread of the VM arrives (pthread/futex
    barrier: waiters sleep; the vCPU halts if it has nothing else)."""

    kind: ClassVar[str] = "barrier"
    prob: float = 1.0

    def __post_init__(self) -> None:
        _phase_common(self)
        if self.prob != 1.0:
            raise ValueError(f"Barrier.prob must be 1.0 (a skipped barrier deadlocks), got {self.prob}")


@dataclass(frozen=True)
class Sleep(_Base):
    """Block until a timer (I/O, timed waits): ``ns`` mean, ns (default
    100000); ``dist`` default ``"fixed"``; ``prob`` default 1.0.

    ``periodic=True``: wake at the next multiple of ``ns`` since the run's
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
        _int(self, "ns", 0, 10**12)
        _choice(self, "dist", DISTS)
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
        _int(self, "to", 1, 65535)
        _phase_common(self)


@dataclass(frozen=True)
class Recv(_Base):
    """Block until a message is available (halt until a message); ``prob``
    default 1.0."""

    kind: ClassVar[str] = "recv"
    prob: float = 1.0

    def __post_init__(self) -> None:
        _phase_common(self)


Phase = Compute | Lock | Ipi | Barrier | Sleep | Send | Recv
_PHASES: dict[str, type] = {c.kind: c for c in (Compute, Lock, Ipi, Barrier, Sleep, Send, Recv)}


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
        phases: a tuple of phases (Compute, Lock, Ipi, Barrier, Sleep, Send, Recv).
        name: a label for tables. Default ``"custom"``.
        iterations: iterations per thread; 0 loops until the end of the run
            (throughput), > 0 ends the run when every VM is done (wall time).
        guest_slice_ns: guest round-robin slice between threads sharing a
            vCPU, ns. Default 4000000 (assumption: a 4 ms guest CFS slice).
        spin_iter_cycles: cycles per spin-loop iteration (turns SPIN_THRESHOLD
            into time). Default 40 (assumption: PAUSE + load on older Xeons).
        spin_threshold: PV queued-lock SPIN_THRESHOLD, iterations. Default
            32768 (kernel, spec §5.2).
    """

    phases: tuple[Any, ...] = (Compute(20_000, dist="exp"), Lock(0, "ticket", 2_000))
    name: str = "custom"
    iterations: int = 0
    guest_slice_ns: int = 4_000_000
    spin_iter_cycles: int = 40
    spin_threshold: int = 32768

    def __post_init__(self) -> None:
        if isinstance(self.phases, list):
            object.__setattr__(self, "phases", tuple(self.phases))
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
                if kinds.setdefault(p.lock, p.lock_kind) != p.lock_kind:
                    raise ValueError(f"Workload.phases[{i}].lock_kind differs from an earlier phase using lock {p.lock}")
        if any(isinstance(p, Recv) for p in self.phases) and not any(isinstance(p, Send) for p in self.phases):
            raise ValueError("Workload.phases: a Recv phase needs a Send phase")
        _instance(self, "name", str)
        _int(self, "iterations", 0)
        _int(self, "guest_slice_ns", 1000)
        _int(self, "spin_iter_cycles", 1, 10**6)
        _int(self, "spin_threshold", 1, 10**9)

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["phases"] = [_phase_to_dict(p) for p in self.phases]
        return d

    @classmethod
    def _field_from_plain(cls, name: str, v: Any) -> Any:
        if name == "phases":
            return tuple(_phase_from_dict(p) for p in v)
        return v


# -------------------------------------------------------------------------- VM


@dataclass(frozen=True)
class Vm(_Base):
    """A VM (or ``count`` identical VMs).

    Attributes:
        vcpus: vCPUs per VM. Default 4.
        count: number of identical VMs. Default 1.
        threads: guest threads; 0 = one per vCPU (default). The digest's
            benchmarks ran 2 threads per vCPU.
        weight: scheduler weight of each vCPU thread, in [2, 88761] (1024 =
            nice 0, the kernel's default for a vCPU thread). Default 1024.
        workload: what the threads run.
        ple, policy, pv, halt_poll: see their classes.
    """

    vcpus: int = 4
    count: int = 1
    threads: int = 0
    weight: int = 1024
    workload: Workload = field(default_factory=Workload)
    ple: Ple = field(default_factory=Ple)
    policy: Policy = field(default_factory=Policy)
    pv: Pv = field(default_factory=Pv)
    halt_poll: HaltPoll = field(default_factory=HaltPoll)

    def __post_init__(self) -> None:
        _int(self, "vcpus", 1, 65536)
        _int(self, "count", 1, 65536)
        _int(self, "threads", 0, 16 * self.vcpus)
        _int(self, "weight", 2, 88761)
        for name, typ in (("workload", Workload), ("ple", Ple), ("policy", Policy), ("pv", Pv), ("halt_poll", HaltPoll)):
            _instance(self, name, typ)
        nthreads = self.threads or self.vcpus
        for i, p in enumerate(self.workload.phases):
            if isinstance(p, Ipi) and p.targets >= self.vcpus and p.targets != 0:
                raise ValueError(f"Vm.workload.phases[{i}].targets must be < vcpus ({self.vcpus}), got {p.targets}")
            if isinstance(p, Send) and p.to >= max(nthreads, 2):
                raise ValueError(f"Vm.workload.phases[{i}].to must be < threads ({nthreads}), got {p.to}")

    @classmethod
    def _field_from_plain(cls, name: str, v: Any) -> Any:
        typ = {"workload": Workload, "ple": Ple, "policy": Policy, "pv": Pv, "halt_poll": HaltPoll}.get(name)
        return typ.from_dict(v) if typ else v


# ---------------------------------------------------------------------- Config


@dataclass(frozen=True)
class Config(_Base):
    """A whole experiment.

    Attributes:
        host: the host.
        vms: a tuple of :class:`Vm` entries.
        duration_ns: simulated time limit, ns. Default 100000000 (0.1 s).
        seed: seed of the run's RNG (PCG64); same seed and config → identical results.
        trace: record the per-host-CPU trace (``Result.trace``). Default False.
        warmup_ns: iterations completing before this instant are not counted
            in ops, throughput and latency (time categories cover the whole
            run), ns. Default 0.
    """

    host: Host = field(default_factory=Host)
    vms: tuple[Vm, ...] = (Vm(),)
    duration_ns: int = 100_000_000
    seed: int = 0
    trace: bool = False
    warmup_ns: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.vms, list):
            object.__setattr__(self, "vms", tuple(self.vms))
        if isinstance(self.vms, Vm):
            object.__setattr__(self, "vms", (self.vms,))
        _instance(self, "host", Host)
        if not isinstance(self.vms, tuple) or not self.vms or not all(isinstance(v, Vm) for v in self.vms):
            raise ValueError(f"Config.vms must be a non-empty tuple of Vm, got {self.vms!r}")
        total = sum(v.vcpus * v.count for v in self.vms)
        if total > 65536:
            raise ValueError(f"Config.vms must hold <= 65536 vCPUs in total, got {total}")
        _int(self, "duration_ns", 1, 2**50)
        _int(self, "seed", 0, U64_MAX)
        _bool(self, "trace")
        _int(self, "warmup_ns", 0, self.duration_ns - 1)
        names: dict[str, Any] = {}
        for i, v in enumerate(self.vms):
            p = v.policy
            if p.kind == "python" and p.fn is not None:
                if p.name in names and names[p.name] is not p.fn:
                    raise ValueError(f"Config.vms[{i}].policy.name {p.name!r} is used by two different callables")
                names[p.name] = p.fn

    @classmethod
    def _field_from_plain(cls, name: str, v: Any) -> Any:
        if name == "host":
            return Host.from_dict(v)
        if name == "vms":
            return tuple(Vm.from_dict(x) for x in v)
        return v

    def to_json(self) -> str:
        """Canonical JSON (sorted keys), the form that crosses into Rust."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, s: str) -> Config:
        return cls.from_dict(json.loads(s))

    def config_hash(self) -> str:
        """SHA-256 of the canonical JSON: a stable name for this point."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def python_policies(self) -> dict[str, Callable[..., Any]]:
        """Name → callable of the Python policies this config uses."""
        out: dict[str, Callable[..., Any]] = {}
        for i, v in enumerate(self.vms):
            p = v.policy
            if p.kind == "python":
                if p.fn is None:
                    raise ValueError(f"Config.vms[{i}].policy {p.name!r} has no callable (fn)")
                out[p.name] = p.fn
        return out

    def replace(self, **changes: Any) -> Config:
        """A copy with top-level fields replaced."""
        return dataclasses.replace(self, **changes)

    def with_path(self, path: str, value: Any) -> Config:
        """A copy with a nested field replaced, e.g. ``"vms.0.policy"`` or ``"host.pcpus"``."""
        return _set_path(self, path.split("."), value, path)


def _set_path(obj: Any, parts: list[str], value: Any, full: str) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(obj, tuple):
        try:
            i = int(head)
            item = obj[i]
        except (ValueError, IndexError):
            raise ValueError(f"path {full!r}: {head!r} is not an index of a tuple of {len(obj)}") from None
        return obj[:i] + (_set_path(item, rest, value, full),) + obj[i + 1 :]
    if not dataclasses.is_dataclass(obj) or head not in {f.name for f in dataclasses.fields(obj)}:
        raise ValueError(f"path {full!r}: {type(obj).__name__} has no field {head!r}")
    return dataclasses.replace(obj, **{head: _set_path(getattr(obj, head), rest, value, full)})  # type: ignore[arg-type]
