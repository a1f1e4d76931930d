"""vcpulab's own vCPU scheduler: the policies of the simulator on real vCPUs.

A real [`vcpulab.experiment.run`][vcpulab.experiment.run] normally leaves its vCPU threads to the
host kernel (EEVDF here). With ``scheduler=`` it schedules them itself:

    from vcpulab import sched
    from vcpulab.experiment import SpinLock, run
    from vcpulab.sim import policies as P

    r = run(SpinLock(kind="ticket"), vcpus=4, vms=2, pcpus=[0, 1], duration_s=1.0,
            scheduler=sched.directed_yield(P.dy_eligible()))
    r.schedule          # one row per token hand-off: t_ns, pcpu, out_vm/out_vcpu, in_vm/in_vcpu, why
    r.spins             # one row per pv spin exit: the holder named, the policy's yield, its latency
    sched.summary(r)    # yields, spin exits, co-stops, hand-off latency quantiles

How it works (``src/kvm/sched/``): each host CPU of ``pcpus`` has one **run
token**; a vCPU thread enters ``KVM_RUN`` only while it holds one, pinned to
that token's CPU. Decisions are taken at slice ends (the run's deadline kick),
at **pv spin exits** (a spin-lock waiter that failed ``spin_window``
iterations in a row writes the id of the vCPU it waits for to a vcpulab I/O
port — a ticket lock's owner of the ticket being served (the holder, or the
next in line when the lock is free), a TAS lock's last holder: the software
analogue of a pause-loop exit, which this host's software KVM path lacks), at halts and wake-ups (the spin-lock programs bracket their ``HLT``
with the same port), and when a vCPU's program ends.

The policies:

* [`host`][vcpulab.sched.host] — the kernel schedules (today's behaviour, the default);
* [`round_robin`][vcpulab.sched.round_robin] — vcpulab's fair time slices, the control;
* [`gang`][vcpulab.sched.gang] — strict co-scheduling: all vCPUs of a VM hold tokens together,
  VMs take turns (Nikunj Dadhania's gang-scheduling patches measured in the
  2012 ``perf sched map`` thread [S4], docs/sources.md);
* [`relaxed_co`][vcpulab.sched.relaxed_co] — VMware ESX's relaxed co-scheduling: a vCPU more than
  ``skew_us`` of run time ahead of its slowest runnable sibling is co-stopped
  ("The CPU Scheduler in VMware vSphere 5.1", VMware technical white paper,
  2013, https://www.vmware.com/content/dam/digitalmarketing/vmware/en/pdf/techpaper/vmware-vsphere-cpu-sched-performance-white-paper.pdf);
* [`balance`][vcpulab.sched.balance] — balance scheduling: sibling vCPUs never share a host
  CPU's queue (O. Sukwong and H. S. Kim, "Is co-scheduling too expensive for
  SMP VMs?", EuroSys 2011, https://doi.org/10.1145/1966445.1966471);
* [`pinned`][vcpulab.sched.pinned] — per-CPU queues as the host kernel's with pinned vCPU
  threads: vCPU thread g (over every VM, in order) at home on CPU g mod n, no
  load balancing; the vehicle of the ``pcpu_is_idle`` proposal [S3], whose
  ``is_idle`` byte says whether a vCPU would run at once only where it cannot move;
* [`directed_yield`][vcpulab.sched.directed_yield] — round-robin slices, and on a pv spin exit any
  directed-yield policy of [`vcpulab.sim.policies`][vcpulab.sim.policies] (the same objects the
  simulator runs, a Python function included) picks a candidate with the same
  candidate view ([`vcpulab.sim.VcpuView`][vcpulab.sim.VcpuView]) and the same
  ``last_boosted`` round-robin start; ``yield_to`` hands the spinner's token
  to it ([S1], ``kvm_vcpu_on_spin``).

What the guest sees: while a runnable vCPU holds no token its steal-time
``preempted`` byte is set (cleared when it gets a token back), so
``vcpu_is_preempted()`` works on this host for guests under vcpulab's
scheduler (the kernel never sets it here); the ``is_idle`` byte of the
``pcpu_is_idle`` proposal [S3] (the pad byte after ``preempted``) is set while
the host CPU the vCPU last ran on holds no token.

Simplifications, stated: a woken vCPU runs the two instructions from its
``HLT`` to its wake-up bracket without a token; the watchdog takes back a
token held past its slice plus ``Scheduler.watchdog_us`` by kicking the
holder out of ``KVM_RUN`` (it cannot stop a Python policy mid-call: a policy
that overruns ``Scheduler.policy_deadline_us`` of CPU time, or ten times
it of wall time, fails the run when it returns). On VMX/SVM hosts the kernel's own directed yield would mix with
vcpulab's: disable pause exits (``Vm.disable_exits(pause=True)``) for VMs
under [`directed_yield`][vcpulab.sched.directed_yield] there; this host has no PLE.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

import polars as pl

from vcpulab import _core
from vcpulab._checks import check_float, check_int, renamed_since

__all__ = [
    "Balance",
    "DirectedYield",
    "Gang",
    "Host",
    "Pinned",
    "RelaxedCo",
    "RoundRobin",
    "ScheduleSummary",
    "Scheduler",
    "WHY",
    "balance",
    "directed_yield",
    "from_config",
    "gang",
    "host",
    "pinned",
    "relaxed_co",
    "round_robin",
    "summary",
]

#: Why a token changed hands (the ``why`` column of ``Run.schedule``):
#: ``start`` the first tokens (once every vCPU thread has arrived), ``wake`` an
#: idle CPU's token to a vCPU woken from its halt, the others the decision
#: (a slice's end, a yield, a co-stop, a halt, a finished vCPU, a gang turn,
#: a watchdog kick); a grant on another idle CPU that a decision made
#: possible carries that decision's.
#: (the names come from the Rust scheduler, ``kvm::sched::Why::ALL``.)
WHY: tuple[str, ...] = tuple(_core.SCHED_WHY)

#: kvm-mechanisms: ``ple_window_max`` defaults to UINT_MAX
_UINT_MAX = 2**32 - 1


@dataclass(frozen=True)
class Scheduler:
    """What ``experiment.run(scheduler=...)`` takes (build one with the
    functions of this module).

    Attributes:
        slice_us: time slice, µs (default 4000: the 4 ms slices of the 2012
            sched maps [S4], CFS's ``sched_latency`` split at the time).
        watchdog_us: a holder this long past its slice's end is kicked out of
            ``KVM_RUN`` and the kick is logged (``why = "watchdog"``), µs.
        policy_deadline_us: the most CPU time a directed-yield policy call
            may take on its thread, µs; a longer call, or one lasting 10 times
            this in wall time (blocked: a sleep, a lock), fails the run with a
            TimeoutError naming it. CPU time, because a call's wall time also
            holds its wait for the GIL and, on an overcommitted host, for a CPU.
        max_decisions: most rows kept in each log (further ones are counted
            in ``Run.schedule_info["dropped"]``).
        seed: seed of the random draws a policy makes (``random``).
    """

    name: ClassVar[str] = "host"
    slice_us: float = 4000.0
    watchdog_us: float = 20_000.0
    policy_deadline_us: float = 10_000.0
    max_decisions: int = 1_000_000
    seed: int = 0

    def __post_init__(self) -> None:
        check_float(f"{type(self).__name__}.slice_us", self.slice_us, 10.0, 10e6, unit="µs")
        check_float(f"{type(self).__name__}.watchdog_us", self.watchdog_us, 100.0, 10e6, unit="µs")
        check_float(f"{type(self).__name__}.policy_deadline_us", self.policy_deadline_us, 1.0, 10e6, unit="µs")
        check_int(f"{type(self).__name__}.max_decisions", self.max_decisions, 1, 100_000_000)
        check_int(f"{type(self).__name__}.seed", self.seed, 0, 2**64 - 1)

    @property
    def is_host(self) -> bool:
        """True for [`host`][vcpulab.sched.host]: the kernel schedules."""
        return self.name == "host"

    def _core(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "slice_ns": int(self.slice_us * 1e3),
            "watchdog_ns": int(self.watchdog_us * 1e3),
            "policy_deadline_ns": int(self.policy_deadline_us * 1e3),
            "max_decisions": self.max_decisions,
            "seed": self.seed,
            "skew_ns": 0,
            "spin_window": 0,
            "spin_grow": 2,
            "spin_shrink": 0,
            "spin_max": _UINT_MAX,
        }

    def _policies(self, vms: int) -> list[Any]:
        return [None] * vms

    def config(self) -> dict[str, Any]:
        """What a Run records of it."""
        d = {k: v for k, v in self.__dict__.items() if k != "policy"}
        return {"scheduler": self.name, **d}


@dataclass(frozen=True)
class Host(Scheduler):
    """The kernel schedules the vCPU threads ([`host`][vcpulab.sched.host])."""

    name: ClassVar[str] = "host"


@dataclass(frozen=True)
class RoundRobin(Scheduler):
    """vcpulab's fair time slices ([`round_robin`][vcpulab.sched.round_robin])."""

    name: ClassVar[str] = "round_robin"


@dataclass(frozen=True)
class Gang(Scheduler):
    """Strict co-scheduling ([`gang`][vcpulab.sched.gang])."""

    name: ClassVar[str] = "gang"


@dataclass(frozen=True)
class RelaxedCo(Scheduler):
    """Relaxed co-scheduling ([`relaxed_co`][vcpulab.sched.relaxed_co]).

    Attributes:
        skew_us: the run-time lead over the slowest runnable sibling beyond
            which a vCPU is co-stopped, µs. Assumption: the white paper
            describes the mechanism, not its threshold; the default, 3000 µs,
            is under one slice so that co-stops happen at slice ends.
    """

    name: ClassVar[str] = "relaxed_co"
    skew_us: float = 3000.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("RelaxedCo.skew_us", self.skew_us, 0.0, 10e6, unit="µs")

    def _core(self) -> dict[str, Any]:
        return {**super()._core(), "skew_ns": int(self.skew_us * 1e3)}


@dataclass(frozen=True)
class Balance(Scheduler):
    """Balance scheduling ([`balance`][vcpulab.sched.balance])."""

    name: ClassVar[str] = "balance"


@dataclass(frozen=True)
class Pinned(Scheduler):
    """Per-CPU queues of pinned vCPU threads ([`pinned`][vcpulab.sched.pinned])."""

    name: ClassVar[str] = "pinned"


@dataclass(frozen=True)
class DirectedYield(Scheduler):
    """Round-robin slices and a directed-yield policy at pv spin exits
    ([`directed_yield`][vcpulab.sched.directed_yield]).

    Attributes:
        policy: a [`vcpulab.sim.Policy`][vcpulab.sim.Policy] (e.g. ``policies.dy_eligible()``,
            or ``policies.python(fn)``); every VM gets it (the VMs of a run
            share one copy of a Python policy, as in the simulator).
        spin_window: failed spin iterations before a pv spin exit (the
            analogue of ``ple_window``, counted in the guest's spin-loop
            iterations, ~5 µs each under this host's emulation). Assumption:
            64 iterations (~0.3 ms), a few lock hold times of the default
            ``SpinLock``, as ``ple_window``'s 4096 cycles are a few hold times
            of a kernel spin lock.
        spin_grow, spin_shrink, spin_max: ``ple_window_grow`` (2),
            ``ple_window_shrink`` (0: reset) and ``ple_window_max`` (UINT_MAX),
            the kernel defaults (kvm-mechanisms: ``__grow_ple_window`` on every
            exit, ``__shrink_ple_window`` when the vCPU runs again after being
            switched out).
    """

    name: ClassVar[str] = "directed_yield"
    policy: Any = None
    spin_window: int = 64
    spin_grow: int = 2
    spin_shrink: int = 0
    spin_max: int = _UINT_MAX

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "policy", _as_policy(self.policy))
        check_int("DirectedYield.spin_window", self.spin_window, 1, _UINT_MAX)
        check_int("DirectedYield.spin_grow", self.spin_grow, 0, _UINT_MAX)
        check_int("DirectedYield.spin_shrink", self.spin_shrink, 0, _UINT_MAX)
        check_int("DirectedYield.spin_max", self.spin_max, self.spin_window, _UINT_MAX)

    def _core(self) -> dict[str, Any]:
        return {
            **super()._core(),
            "spin_window": self.spin_window,
            "spin_grow": self.spin_grow,
            "spin_shrink": self.spin_shrink,
            "spin_max": self.spin_max,
        }

    def _policies(self, vms: int) -> list[Any]:
        from vcpulab.sim._config import _to_plain

        p = self.policy
        plain = dict(_to_plain(p))
        plain.pop("fn", None)
        fn = None
        if p.fn is not None:
            # one copy per run, shared by its VMs (as the simulator does per sweep point)
            try:
                fn = copy.deepcopy(p.fn)
            except Exception as e:
                raise ValueError(
                    f"the Python policy {p.name!r} cannot be deep-copied ({type(e).__name__}: {e}); each run needs "
                    "its own copy"
                ) from e
        return [(json.dumps(plain), fn)] * vms

    def config(self) -> dict[str, Any]:
        from vcpulab.sim import policies as P
        from vcpulab.sim._config import _to_plain

        plain = dict(_to_plain(self.policy))
        plain.pop("fn", None)
        return {**super().config(), "policy": plain, "policy_label": P.label(self.policy)}


def _as_policy(p: Any) -> Any:
    from vcpulab.sim import policies as P
    from vcpulab.sim._config import Policy

    if isinstance(p, Policy):
        return p
    if isinstance(p, str):
        return P.by_name(p)
    if callable(p):
        return P.python(p)
    raise TypeError(
        "directed_yield: policy must be a vcpulab.sim.Policy (e.g. policies.dy_eligible()), a policy name "
        f"({', '.join(P.NAMES)}) or a callable fn(spinner, candidates), got {type(p).__name__} {p!r}"
    )


def host() -> Host:
    """The kernel schedules the vCPU threads: today's behaviour (the default)."""
    return Host()


def round_robin(slice_us: float = 4000.0, **kw: Any) -> RoundRobin:
    """vcpulab's own fair time slices: one queue of every runnable vCPU;
    a slice's end hands the token to the queue's head. The control the other
    policies are compared with."""
    return RoundRobin(slice_us=slice_us, **kw)


def gang(slice_us: float = 4000.0, **kw: Any) -> Gang:
    """Strict co-scheduling: all vCPUs of one VM hold tokens together, VMs
    take turns of ``slice_us``; a turn passes when every vCPU of the VM has
    ended its slice. Needs every VM's vCPUs to fit the host CPUs."""
    return Gang(slice_us=slice_us, **kw)


def relaxed_co(skew_us: float = 3000.0, slice_us: float = 4000.0, **kw: Any) -> RelaxedCo:
    """Relaxed co-scheduling: round-robin slices, but a vCPU more than
    ``skew_us`` of run time ahead of its slowest runnable sibling is
    co-stopped (``why = "co_stop"``) until that sibling catches up."""
    return RelaxedCo(skew_us=skew_us, slice_us=slice_us, **kw)


def balance(slice_us: float = 4000.0, **kw: Any) -> Balance:
    """Balance scheduling: vCPU i of VM v has home CPU (i + v) mod n, so
    siblings never share a CPU's queue; each CPU runs its queue round-robin."""
    return Balance(slice_us=slice_us, **kw)


def pinned(slice_us: float = 4000.0, **kw: Any) -> Pinned:
    """Per-CPU queues as the host kernel's with pinned vCPU threads: vCPU
    thread g (counted over every VM, VM by VM) is at home on CPU g mod n of
    ``pcpus`` in ascending order (the simulator's ``Host.affinity="round_robin"``
    map), unless ``placement=`` pins it to one CPU; each CPU runs its
    queue round-robin, and nothing moves a vCPU. Unlike
    [`balance`][vcpulab.sched.balance], siblings may share a CPU."""
    return Pinned(slice_us=slice_us, **kw)


#: the date ``directed_yield(spin_threshold=)`` became ``spin_window=``, the field's name
_SPIN_WINDOW_RENAMED = "2026-12-07"


@renamed_since(
    _SPIN_WINDOW_RENAMED,
    "one name for the pv spin window: DirectedYield.spin_window",
    spin_threshold="spin_window",
)
def directed_yield(
    policy: Any,
    spin_window: int = 64,
    slice_us: float = 4000.0,
    *,
    spin_grow: int = 2,
    spin_shrink: int = 0,
    spin_max: int = _UINT_MAX,
    **kw: Any,
) -> DirectedYield:
    """Round-robin slices; at a pv spin exit ``policy`` (a
    [`vcpulab.sim.Policy`][vcpulab.sim.Policy], a policy name, or a callable
    ``fn(spinner, candidates)`` as [`vcpulab.sim.policies.python`][vcpulab.sim.policies.python] takes)
    chooses a candidate and the spinner's token goes to it. The spin
    window (``spin_window``: failed spin-lock iterations before a pv spin
    exit, the guest's counterpart of ``ple_window``) grows by ``spin_grow``
    and shrinks by ``spin_shrink`` as ``ple_window`` does, up to
    ``spin_max``. ``spin_threshold=`` is its former name (deprecated since
    2026-12-07)."""
    return DirectedYield(
        policy=policy,
        spin_window=spin_window,
        slice_us=slice_us,
        spin_grow=spin_grow,
        spin_shrink=spin_shrink,
        spin_max=spin_max,
        **kw,
    )


_BY_NAME: dict[str, type[Scheduler]] = {
    c.name: c for c in (Host, RoundRobin, Gang, RelaxedCo, Balance, Pinned, DirectedYield)
}


def from_config(d: dict[str, Any] | None) -> Scheduler:
    """The scheduler a Run recorded (``Run.config["scheduler"]``, [`config`][vcpulab.sched.Scheduler.config]);
    None or a Run from before schedulers: [`host`][vcpulab.sched.host]. A Python policy cannot be
    rebuilt from a record (its code is not in it): ValueError."""
    if d is None:
        return host()
    d = dict(d)
    cls = _BY_NAME.get(d.pop("scheduler", "host"))
    if cls is None:
        raise ValueError(f"unknown scheduler {d!r}; expected one of {sorted(_BY_NAME)}")
    label = d.pop("policy_label", None)
    if cls is DirectedYield:
        from vcpulab.sim._config import Policy

        plain = d.pop("policy")
        if plain.get("kind") == "python":
            raise ValueError(
                f"the Python policy {label!r} of a recorded run cannot be rebuilt (its code is not recorded); "
                "pass the scheduler yourself"
            )
        d["policy"] = Policy(**plain)
    return cls(**d)


def _core_config(s: Scheduler, cpus: list[int], window_gpas: list[int | None], vms: int) -> dict[str, Any] | None:
    """The dict ``_core.run_experiment(scheduler=...)`` takes (None: the host schedules)."""
    if s.is_host:
        return None
    return {**s._core(), "cpus": list(cpus), "window_gpas": window_gpas, "policies": s._policies(vms)}


@dataclass
class ScheduleSummary:
    """What [`summary`][vcpulab.sched.summary] returns: counts and the hand-off latency distribution."""

    decisions: int
    by_why: dict[str, int]
    spin_exits: int
    yields_attempted: int
    yields_successful: int
    co_stops: int
    watchdog_kicks: int
    #: from a pv spin exit to the chosen candidate entering KVM_RUN, µs: quantiles
    yield_latency_us: dict[str, float] = field(default_factory=dict)
    #: the directed-yield policy's call per spin exit, µs: quantiles
    policy_us: dict[str, float] = field(default_factory=dict)


def summary(run: Any) -> ScheduleSummary:
    """The decision log of a scheduled [`Run`][vcpulab.experiment.Run], summed up; or of its twin,
    a traced ``sim.Result`` under a token scheduler (its pv spin exits and yields from the
    ``vcpus`` frame's counters: ``ple_exits``, ``yield_attempts``, ``yield_ok``; the simulator
    times no hand-off latency or policy call, so those quantiles are empty)."""
    d = getattr(run, "schedule", None)
    vc = getattr(run, "vcpus", None)
    if d is not None and isinstance(vc, pl.DataFrame) and not hasattr(run, "spins"):
        by_why = {w: int((d["why"] == w).sum()) for w in WHY}
        return ScheduleSummary(
            decisions=d.height,
            by_why=by_why,
            spin_exits=int(vc["ple_exits"].sum()),
            yields_attempted=int(vc["yield_attempts"].sum()),
            yields_successful=int(vc["yield_ok"].sum()),
            co_stops=by_why["co_stop"],
            watchdog_kicks=0,
        )
    s = getattr(run, "spins", None)
    if d is None or s is None:
        raise ValueError("summary needs a Run of experiment.run(..., scheduler=...) with a vcpulab scheduler")
    by_why = {w: int((d["why"] == w).sum()) for w in WHY}

    def quantiles(col: str) -> dict[str, float]:
        x = s.filter(pl.col(col) > 0)[col].cast(pl.Float64) / 1e3
        if not x.len():
            return {}
        return {
            n: float(x.quantile(p, "nearest")) for n, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
        }  # type: ignore[misc]

    info = getattr(run, "schedule_info", None) or {}
    return ScheduleSummary(
        decisions=d.height,
        by_why=by_why,
        spin_exits=s.height,
        yields_attempted=int(s["attempts"].sum()) if s.height else 0,
        yields_successful=int((s["yielded_to"] >= 0).sum()) if s.height else 0,
        co_stops=by_why["co_stop"],
        watchdog_kicks=int(info.get("watchdog_kicks", 0)),
        yield_latency_us=quantiles("latency_ns"),
        policy_us=quantiles("policy_ns"),
    )
