"""Eras of kernel and hardware, and cost profiles, as data.

An [`Era`][vcpulab.validation.Era] is one parameter set for the kernels and machines a group of
published results was measured on (2012 3.x, 2015 4.x, 2019 5.x, 2021 5.14,
today's 6.x). It maps onto the simulator's configuration objects
([`vcpulab.sim.Host`][], [`Ple`][vcpulab.sim.Ple],
[`Pv`][vcpulab.sim.Pv], [`HaltPoll`][vcpulab.sim.HaltPoll], the guest kernel's
spin lock and [`Workload`][vcpulab.sim.Workload] constants, the directed-yield
policy of that kernel) field by field. Every value is a [`Param`][vcpulab.validation.Param] with
its unit and its source: a kernel default (the file or function named), a
cited hardware figure (with its reference), a measurement, or an assumption
(said so, with the reason; where vcpulab found no published figure).

Costs are kept apart, in a [`CostProfile`][vcpulab.validation.CostProfile]: ``hardware`` (figures for a
hardware-virtualised guest, cited where a figure was found) and
``this_host`` (measured by [`vcpulab.calibrate.halt_poll`][] on the
project's machine, whose guests run emulated). A validation case picks an era
and a cost profile; it never sets an era's or a profile's value itself (see
[`vcpulab.validation.cases`][]: an override needs a recorded reason).

Adding an option of a new simulator version to an era is adding a
[`Param`][vcpulab.validation.Param] to the era's mapping for that class (``host``, ``ple``, ``pv``,
``halt_poll``, ``workload``): e.g. ``"scheduler": Param("cfs", "", KERNEL,
"kernel/sched/fair.c before v6.6")`` once ``Host.scheduler`` accepts
``"cfs"``. [`PENDING`][vcpulab.validation.PENDING] lists, per era, what the sources' kernels did that
today's simulator cannot express yet, and which part of the model it needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from vcpulab.sim import halt_poll as hp
from vcpulab.sim import policies as P
from vcpulab.sim._config import Cfs, Guest, HaltPoll, Host, HostNoise, Ple, Policy, Pv

__all__ = [
    "ASSUMPTION",
    "COSTS",
    "CostProfile",
    "ERAS",
    "ERA_2012",
    "ERA_2015",
    "ERA_2019",
    "ERA_2021",
    "ERA_6X",
    "Era",
    "FITTED",
    "PLE2012_1X",
    "HALTPOLL2015_COMMIT",
    "PARSEC2021_BARRIER",
    "BOOST2019_READY",
    "SETS",
    "CalibrationSet",
    "calibration_of",
    "fitted_param",
    "HARDWARE",
    "HARDWARE_COSTS",
    "KERNEL",
    "KINDS",
    "MEASURED",
    "PENDING",
    "PUBLISHED_SETUP",
    "Param",
    "SECTIONS",
    "era",
    "eras_markdown",
    "this_host",
]

#: the ``guest`` section's fields that are [`vcpulab.sim.Guest`][] fields (the
#: others, ``lock_kind`` and ``policy``, set the workload's locks and the policy)
_GUEST_FIELDS = tuple(f.name for f in dataclasses.fields(Guest))

#: a value's kind: the kernel's default of the era
KERNEL = "kernel default"
#: a value's kind: a figure a cited hardware source gives
HARDWARE = "cited hardware figure"
#: a value's kind: measured (on this host, or by a source)
MEASURED = "measured"
#: a value's kind: no source gives it; chosen and documented (validation.sensitivity scales these)
ASSUMPTION = "assumption"
#: a value's kind: part of a source's published set-up
PUBLISHED_SETUP = "published set-up"
#: a value's kind: an unpublished value fitted once, jointly with the others
#: of its calibration set, on that set's cases only
#: ([`vcpulab.validation.calibration`][]); ``Param.calibration`` names the set
FITTED = "fitted"
#: every kind of source a value can have
KINDS = (KERNEL, HARDWARE, MEASURED, ASSUMPTION, PUBLISHED_SETUP, FITTED)

#: the configuration sections an era or a cost profile maps onto; "guest" holds
#: the guest kernel's choices (``lock_kind``, ``policy``), "halt_poll_model"
#: the one-CPU halt-polling model's [`vcpulab.sim.HaltPoll`][] /
#: [`Costs`][vcpulab.sim.halt_poll.Costs] fields, "programs" the constants of
#: the era's benchmark programs that the cases' presets stand in for and no
#: source gives (a PARSEC barrier step's length), read by the case builders
#: (``Ctx.program``).
SECTIONS = ("host", "ple", "pv", "halt_poll", "workload", "guest", "halt_poll_model", "programs")


@dataclass(frozen=True)
class Param:
    """One value with its unit and where it comes from.

    Attributes:
        value: the value, in the unit of the simulator field it sets.
        unit: ``"ns"``, ``"cycles"``, ``"kHz"``, ``""`` for choices/flags/counts.
        kind: one of [`KERNEL`][vcpulab.validation.eras.KERNEL], [`HARDWARE`][vcpulab.validation.eras.HARDWARE], [`MEASURED`][vcpulab.validation.eras.MEASURED],
            [`ASSUMPTION`][vcpulab.validation.eras.ASSUMPTION], ``"published set-up"``.
        source: the kernel file/function and constant, the reference of a
            hardware figure, the measurement, or the reason of an assumption
            (for a fitted value: the fit, its grid and the assumption it replaced).
        calibration: for a [`FITTED`][vcpulab.validation.eras.FITTED] value, the name of
            its calibration set ([`SETS`][vcpulab.validation.eras.SETS]): the
            cases it was fitted on, which the score keeps apart from the
            held-out ones; None for every other kind.
    """

    value: Any
    unit: str
    kind: str
    source: str
    calibration: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Param.kind must be one of {KINDS}, got {self.kind!r}")
        if (self.kind == FITTED) != (self.calibration is not None):
            raise ValueError(
                "Param.calibration names the calibration set of a fitted value, and only of one "
                f"(kind {self.kind!r}, calibration {self.calibration!r})"
            )
        if not isinstance(self.source, str) or len(self.source.strip()) < 8:
            raise ValueError(f"Param.source must say where the value comes from, got {self.source!r}")
        if not isinstance(self.unit, str):
            raise ValueError(f"Param.unit must be a str, got {self.unit!r}")


def _freeze(d: Mapping[str, Param]) -> Mapping[str, Param]:
    for k, v in d.items():
        if not isinstance(v, Param):
            raise ValueError(f"{k}: expected a Param, got {v!r}")
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class Era:
    """One era of kernel and hardware (see the module docstring).

    Attributes:
        name: ``"2012-3.x"``, ``"2015-4.x"``, ``"2019-5.x"``, ``"2021-5.14"``, ``"6.x"``.
        kernel: the host/guest kernels the era stands for.
        hardware: the machines the era's sources measured on.
        host, ple, pv, halt_poll, workload: field → [`Param`][vcpulab.validation.Param] for
            [`vcpulab.sim.Host`][], [`Ple`][vcpulab.sim.Ple],
            [`Pv`][vcpulab.sim.Pv], [`HaltPoll`][vcpulab.sim.HaltPoll] and the
            [`Workload`][vcpulab.sim.Workload] constants of the guest kernel.
        guest: ``lock_kind`` (the guest's kernel spinlock) and ``policy``
            (the host's ``kvm_vcpu_on_spin``) as [`Param`][vcpulab.validation.Param].
        halt_poll_model: the module parameters of the one-CPU halt-polling
            model ([`vcpulab.sim.HaltPoll`][] fields).
        programs: constants of the era's benchmark programs that the cases'
            presets stand in for and no source publishes (e.g.
            ``parsec_step_ns``, the work of one thread between two barriers
            of the 2021 PARSEC runs); a case builder reads them with
            ``Ctx.program``, so every case of the era shares one value.
    """

    name: str
    kernel: str
    hardware: str
    host: Mapping[str, Param] = field(default_factory=dict)
    ple: Mapping[str, Param] = field(default_factory=dict)
    pv: Mapping[str, Param] = field(default_factory=dict)
    halt_poll: Mapping[str, Param] = field(default_factory=dict)
    workload: Mapping[str, Param] = field(default_factory=dict)
    guest: Mapping[str, Param] = field(default_factory=dict)
    halt_poll_model: Mapping[str, Param] = field(default_factory=dict)
    programs: Mapping[str, Param] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for s in SECTIONS:
            object.__setattr__(self, s, _freeze(getattr(self, s)))
        # every value must be accepted by the simulator's own validation
        Host(**self.values("host"))
        Ple(**self.values("ple"))
        Pv(**self.values("pv"))
        HaltPoll(**self.values("halt_poll"))
        Guest(**{k: v for k, v in self.values("guest").items() if k in _GUEST_FIELDS})
        if not isinstance(self.guest["policy"].value, Policy):
            raise ValueError(f"Era {self.name}: guest.policy must be a Policy")

    def values(self, section: str) -> dict[str, Any]:
        """``{field: value}`` of one section."""
        if section not in SECTIONS:
            raise ValueError(f"section must be one of {SECTIONS}, got {section!r}")
        return {k: p.value for k, p in getattr(self, section).items()}

    def params(self) -> dict[str, Param]:
        """Every value as ``{"section.field": Param}``."""
        return {f"{s}.{k}": p for s in SECTIONS for k, p in getattr(self, s).items()}

    def with_overrides(self, overrides: Mapping[str, tuple[Any, str]]) -> Era:
        """A copy with ``{"section.field": (value, reason)}`` replaced; each
        replaced value's source says it is a case override and why."""
        secs: dict[str, dict[str, Param]] = {s: dict(getattr(self, s)) for s in SECTIONS}
        for path, (value, reason) in overrides.items():
            sec, _, name = path.partition(".")
            if sec not in SECTIONS or not name:
                raise ValueError(f"override {path!r}: expected 'section.field' with section in {SECTIONS}")
            if not isinstance(reason, str) or len(reason.strip()) < 10:
                raise ValueError(f"override {path!r} needs a recorded reason, got {reason!r}")
            old = secs[sec].get(name)
            secs[sec][name] = Param(value, old.unit if old else "", PUBLISHED_SETUP, f"case override: {reason}")
        return dataclasses.replace(self, **secs)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CostProfile:
    """Costs of exits and handlers, apart from the era's parameters.

    Attributes:
        name: ``"hardware"`` or ``"this_host"``.
        description: what the profile stands for.
        host, ple, pv: field → [`Param`][vcpulab.validation.Param] for the main engine.
        halt_poll_model: [`vcpulab.sim.halt_poll.Costs`][] fields.
    """

    name: str
    description: str
    host: Mapping[str, Param] = field(default_factory=dict)
    ple: Mapping[str, Param] = field(default_factory=dict)
    pv: Mapping[str, Param] = field(default_factory=dict)
    halt_poll_model: Mapping[str, Param] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for s in ("host", "ple", "pv", "halt_poll_model"):
            object.__setattr__(self, s, _freeze(getattr(self, s)))
        hp.Costs(**self.values("halt_poll_model"))

    def values(self, section: str) -> dict[str, Any]:
        return {k: p.value for k, p in getattr(self, section, {}).items()}

    def params(self) -> dict[str, Param]:
        return {f"{s}.{k}": p for s in ("host", "ple", "pv", "halt_poll_model") for k, p in getattr(self, s).items()}

    def costs(self) -> hp.Costs:
        """The one-CPU halt-polling model's [`Costs`][vcpulab.sim.halt_poll.Costs]."""
        return hp.Costs(**self.values("halt_poll_model"))


# -------------------------------------------------- calibration sets (the class)


@dataclass(frozen=True)
class CalibrationSet:
    """One declared calibration.

    Attributes:
        name: the set's name, which each fitted ``Param.calibration`` carries.
        profile: what it fits: a cost profile's name (``"hardware"``), or
            an era's (``"2021-5.14"``, e.g. for its ``programs`` values).
        cases: the registered cases the values are fitted on; every other
            case is held out.
        grid: ``"section.field"`` of the profile or era → the candidate
            values (in the field's unit), each within what is physically
            plausible.
        rule: how the cases were chosen, before any fit was run.
        settings: the seeds and duration scale of the fit's runs.
        adopted: whether the profile or era carries the fit's values (as fitted
            ``Param`` s naming the set). A fit is adopted only when every
            robustness probe ([`vcpulab.validation.probes`][]) clean under the
            assumptions stays clean: the probes are checks of the model, not
            published data, so the rule looks at no held-out case.
        outcome: what the fit chose and did, in words (the record of the
            fit; ``benches/calibrate_costs.py`` reruns it).
    """

    name: str
    profile: str
    cases: tuple[str, ...]
    grid: Mapping[str, tuple[Any, ...]]
    rule: str
    settings: Mapping[str, Any]
    adopted: bool = False
    outcome: str = "not fitted yet"

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", MappingProxyType(dict(self.grid)))
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))
        if not self.cases or len(set(self.cases)) != len(self.cases):
            raise ValueError(f"CalibrationSet {self.name!r}: cases must be distinct and not empty")
        if not self.grid:
            raise ValueError(f"CalibrationSet {self.name!r}: the grid is empty")
        for path, values in self.grid.items():
            if "." not in path or not values:
                raise ValueError(f"CalibrationSet {self.name!r}: grid entry {path!r} needs 'section.field' and values")


def fitted_param(cs: CalibrationSet, path: str, value: Any, unit: str, note: str, replaces: str) -> Param:
    """``value`` of the set's field ``path`` as a [`FITTED`][vcpulab.validation.eras.FITTED]
    ``Param`` naming the set; its source names the set's cases and grid, ``note``
    (when and how it was chosen) and what it ``replaces``."""
    return Param(
        value,
        unit,
        FITTED,
        f"fitted on the {cs.name} set ({', '.join(cs.cases)}), grid {list(cs.grid[path])}, {note}; replaces {replaces}",
        calibration=cs.name,
    )


def _fitted(cs: CalibrationSet, path: str, value: Any, unit: str, replaces: str) -> Param:
    """A value of an adopted set's fit (its rank 1), noted with the fit's record."""
    if not cs.adopted or value not in cs.grid.get(path, ()):
        raise ValueError(f"{cs.name}: {path} = {value!r} is not an adopted value of the set's grid")
    return fitted_param(cs, path, value, unit, cs.outcome.split(":")[0], replaces)


# --------------------------------------------------------------- references

_SPEC_PLE = "arch/x86/kvm/x86.h + vmx/vmx.c module parameters"
_PAUSE_MANUAL = (
    "Intel 64 and IA-32 Architectures Optimization Reference Manual (Intel, 2016 and later), Skylake server "
    "microarchitecture section: the PAUSE latency 'is about 10 cycles' on earlier microarchitectures and "
    "'as many as 140 cycles' on Skylake; https://www.intel.com/content/www/us/en/developer/articles/technical/"
    "intel-sdm.html"
)
_SPLITX = (
    "Landau, Ben-Yehuda, Gordon, 'SplitX: Split Guest/Hypervisor Execution on Multi-Core', USENIX WIOV 2011, "
    "Table 1: the direct cost of an exit (world switch out and back) ~2,000 cycles on a Xeon X5570 at 2.93 GHz "
    "with KVM (2.6.34) = 683 ns; a copy of the paper: "
    "https://m.moam.info/splitx-split-guest-hypervisor-execution-on-multi-core-usenix_59e5379e1723ddf9a2a71953.html"
)


def _k(value: Any, unit: str, source: str) -> Param:
    return Param(value, unit, KERNEL, source)


def _a(value: Any, unit: str, source: str) -> Param:
    return Param(value, unit, ASSUMPTION, source)


def _h(value: Any, unit: str, source: str) -> Param:
    return Param(value, unit, HARDWARE, source)


# values shared by every era (kernel defaults that never changed in the range)
_TICK = _k(4_000_000, "ns", "CONFIG_HZ_250, the default of kernel/Kconfig.hz (HZ=250: a 4 ms tick)")
_SLICE = _k(
    3_000_000,
    "ns",
    "kernel/sched/fair.c: sysctl_sched_min_granularity (CFS) / sysctl_sched_base_slice (EEVDF) 0.75 ms "
    "x (1 + ilog2(min(ncpus, 8))) = 3 ms (the CFS eras' min_granularity floor and the 6.x era's EEVDF slice)",
)
_WAKE = _k(True, "", "kernel/sched/fair.c: check_preempt_wakeup / wakeup_preempt (wake-up preemption on)")
_WINDOW = _k(4096, "cycles", f"KVM_VMX_DEFAULT_PLE_WINDOW = 4096 ({_SPEC_PLE})")
_SHRINK = _k(0, "", f"KVM_DEFAULT_PLE_WINDOW_SHRINK = 0: reset to ple_window on sched-in ({_SPEC_PLE})")
_VMX = _k("vmx", "", "every source of the registry measured on Intel hosts (VMX pause-loop exiting)")
_ENABLED = _k(True, "", "vmx.c: PLE on when the CPU has it (ple_gap = KVM_DEFAULT_PLE_GAP = 128)")
_SPIN_THRESHOLD = _k(32768, "iterations", "SPIN_THRESHOLD = 1 << 15, arch/x86/include/asm/spinlock.h (pv spinlocks)")
_GUEST_SLICE = _a(4_000_000, "ns", "a 4 ms guest CFS slice between threads sharing a vCPU (the simulator default)")
_SPIN_OLD = _h(40, "cycles", f"PAUSE ~10 cycles before Skylake plus the spin loop's load and compare; {_PAUSE_MANUAL}")
_SPIN_SKL = _h(150, "cycles", f"PAUSE up to ~140 cycles from Skylake on, plus the loop; {_PAUSE_MANUAL}")
_NO_STEAL = _k(
    False,
    "",
    "no preempted byte in struct kvm_steal_time before v4.9 ('x86/kvm: support vCPU preemption check', 2016)",
)
_STEAL = _k(True, "", "KVM_FEATURE_STEAL_TIME with the preempted byte (v4.9+), offered by QEMU's default CPU model")
_NO_SCHED_YIELD = _k(False, "", "KVM_FEATURE_PV_SCHED_YIELD arrived in v5.2 (2019)")
_SCHED_YIELD = _k(True, "", "KVM_FEATURE_PV_SCHED_YIELD (v5.2+): call-function IPIs yield to a preempted target")
_APICV = _h(True, "", "posted interrupts / APICv on Xeons from Ivy Bridge-EP (2013) on (Intel SDM vol. 3, ch. 29)")
_NO_APICV = _h(False, "", "no posted interrupts before Ivy Bridge-EP (Intel SDM vol. 3, ch. 29: APIC virtualization)")
_PLACEMENT = _k("available_idle", "", "kernel/sched/core.c: available_idle_cpu() = idle_cpu && !vcpu_is_preempted")
_GUEST_POLL = _k(0, "ns", "cpuidle-haltpoll is not loaded by default: the guest halts at once")
# the PV switches and the guest kernel's lock rules (the guest model)
_NO_KICK_YIELD = _k(False, "", "KVM_HC_KICK_CPU only wakes the kicked vCPU before 266e85a5ec91 (2019)")
_KICK_YIELD = _k(
    True, "", "kvm_pv_kick_cpu_op + kvm_sched_yield: 266e85a5ec91 'KVM: X86: Boost queue head vCPU' (2019)"
)
_NO_PV_TLB = _k(False, "", "KVM_FEATURE_PV_TLB_FLUSH arrived in v4.16 (2018)")
_PV_TLB = _k(True, "", "KVM_FEATURE_PV_TLB_FLUSH (v4.16+): kvm_flush_tlb_multi skips preempted vCPUs")
_NO_PV_IPI = _k(False, "", "KVM_FEATURE_PV_SEND_IPI arrived in v4.19 (2018)")
_PV_IPI = _k(True, "", "KVM_FEATURE_PV_SEND_IPI (v4.19+): one hypercall per multicast IPI")
_LOCKS_KERNEL = _k("kernel", "", "kernel/locking/qspinlock_paravirt.h and osq_lock.c rules (sim.Guest.lock_model)")
_WAIT_EARLY = _k(
    "prev_halted",
    "",
    "pv_wait_early(): the previous node is not running (cd0272fab785, v4.5; kernel/locking/qspinlock_paravirt.h)",
)
_STEAL_NONE = _k(
    "none",
    "",
    "no lock stealing before v4.5 (1c4941fd53af 'locking/pvqspinlock: Allow limited lock stealing'): the slow "
    "path's queued_spin_trylock takes only a lock word of 0 (no queue)",
)
_STEAL_HYBRID = _k(
    "hybrid",
    "",
    "pv_hybrid_queued_unfair_trylock: 11752adb68a3 'locking/pvqspinlock: Implement hybrid PV queued/unfair "
    "locks' (v4.15, 2017; kernel/locking/qspinlock_paravirt.h)",
)
_NO_VCPU_PREEMPTED = _k(False, "", "no vcpu_is_preempted() in owner_on_cpu/osq_lock before v4.10 (2016)")
_VCPU_PREEMPTED = _k(True, "", "owner_on_cpu() and osq_lock() ask vcpu_is_preempted() (v4.10+)")
_GUEST_LB = _k(
    True,
    "",
    "the guest's CFS balances its threads between its vCPUs: idle_balance/newidle_balance with the avg_idle >= "
    "sysctl_sched_migration_cost gate, and nohz idle balancing kicked from a busy CPU's tick (kernel/sched/fair.c)",
)
# the guest kernel's wake-up placement (sim.Guest.wake_placement and its knobs)
_GUEST_WAKE = _k(
    "select_task_rq_fair",
    "",
    "kernel/sched/fair.c select_task_rq_fair: wake_affine (wake_affine_idle, wake_affine_weight), then "
    "select_idle_sibling over the guest's LLC",
)
_GUEST_NO_WAKE_WIDE = _k(
    False, "", "no wake_wide before 62470419e993 'sched: Implement smarter wake-affine logic' (v3.12)"
)
_GUEST_WAKE_WIDE = _k(True, "", "wake_wide (62470419e993, v3.12; 63b0e9edceec 'sched/fair: Beef up wake_wide()', 2015)")
_GUEST_NO_RECENT = _k(
    False,
    "",
    "no p->recent_used_cpu before 'sched/fair: Use a recently used CPU as an idle candidate and the basis for SIS' "
    "(Mel Gorman, v4.16)",
)
_GUEST_RECENT = _k(True, "", "select_idle_sibling tries p->recent_used_cpu (v4.16 on)")
_GUEST_SCAN_FULL_3X = _k(
    "full",
    "",
    "3.x/4.x select_idle_sibling scans the LLC's groups for an idle one with no limit (the first limit came with "
    "10e2f1acd010, v4.9)",
)
_GUEST_SCAN_SIS_PROP = _k(
    "full",
    "",
    "SIS_PROP (1ad3aaf3fcd2, v4.13 to 984ffb6a4366, v6.7) limits the scan by avg_idle / avg_scan_cost, timings "
    "the model does not keep; the whole LLC stands in (an idle vCPU's avg_idle allows a long scan)",
)
_GUEST_SCAN_SIS_UTIL = _k(
    "sis_util", "", "SIS_UTIL (70fb5ccf2ebb, v6.0; on by default): nr_idle_scan from the LLC's utilisation sum"
)
_GUEST_LLC_SOCKETS = _a(
    1,
    "vCPUs",
    "the sources do not give the guest's topology; QEMU's -smp N before 6.2 (4a0af2930a4e 'Prefer cores over "
    "sockets in smp parsing since 6.2') and libvirt without <topology> (-smp N,sockets=N,cores=1,threads=1) "
    "give N one-core sockets, each vCPU its own L3 (CPUID leaf 4): a one-vCPU LLC, so select_idle_sibling "
    "returns its target at once",
)
_GUEST_LLC_VM = _a(
    0,
    "vCPUs",
    "one L3 spanning the VM: QEMU 6.2+ machine types' -smp N (cores preferred over sockets, 4a0af2930a4e); "
    "libvirt without <topology> still asks for one-core sockets (a one-vCPU LLC)",
)
_GUEST_SMT = _k(1, "", "QEMU's -smp default threads=1 (and libvirt's without <topology>)")


def _guest_wake(wake_wide: Param, recent: Param, scan: Param, llc: Param) -> dict[str, Param]:
    """The guest's wake-up placement of one era."""
    return {
        "wake_placement": _GUEST_WAKE,
        "wake_wide": wake_wide,
        "recent_used_cpu": recent,
        "idle_scan": scan,
        "llc_vcpus": llc,
        "threads_per_core": _GUEST_SMT,
    }


_HP_MAX = _k(200_000, "ns", "KVM_HALT_POLL_NS_DEFAULT = 200000 on x86 (arch/x86/include/asm/kvm_host.h)")
_HP_GROW = _k(2, "", "halt_poll_ns_grow = 2 (virt/kvm/kvm_main.c)")
_HP_GROW_START = _k(
    10_000, "ns", "halt_poll_ns_grow_start = 10000 (virt/kvm/kvm_main.c; a fixed 10 us start before 2019)"
)
_HP_SHRINK_OLD = _k(0, "", "halt_poll_ns_shrink = 0 (reset to 0) before ~v6.8 (virt/kvm/kvm_main.c)")
_HP_SHRINK_NEW = _k(2, "", "halt_poll_ns_shrink = 2 since ~v6.8 (virt/kvm/kvm_main.c)")
_ESRCH = _k(True, "", "kernel/sched/core.c yield_to(): -ESRCH when both run queues hold one task (since 2013)")
_CFS_BUDDY = _k(
    "always",
    "",
    "CFS before v6.6: pick_next_entity() takes cfs_rq->next (set by yield_to_task_fair) unless "
    "wakeup_preempt_entity() finds it too unfair against the leftmost task; Host.scheduler='cfs' follows that "
    "rule (cfs.rs cfs_pick), and this value is read only by the EEVDF scheduler",
)
_CFS_YIELD = _k(
    "deadline",
    "",
    "CFS before v6.6: yield_task_fair() makes the yielder the skip buddy, which Host.scheduler='cfs' does "
    "(sched.rs yield_to, cfs.rs cfs_pick); this value is read only by the EEVDF scheduler",
)
# host model: the scheduler class, time out of lock-step, host
# noise, wake-up placement and balancing; topology (sockets, SMT) is a
# published set-up of each case, not an era value
_INTEL_IDLE = "drivers/idle/intel_idle.c"
_IDLE_NHM = _h(
    ((3_000, 6_000), (10_000, 20_000), (20_000, 80_000), (200_000, 800_000)),
    "ns",
    f"{_INTEL_IDLE} nehalem_cstates (used for Nehalem/Westmere Xeons): C1 3/6 us, C1E 10/20, C3 20/80, C6 200/800 "
    "(exit latency / target residency)",
)
_IDLE_SKX = _h(
    ((2_000, 2_000), (10_000, 20_000), (133_000, 600_000)),
    "ns",
    f"{_INTEL_IDLE} skx_cstates (Skylake-SP / Cascade Lake Xeons): C1 2/2 us, C1E 10/20, C6 133/600",
)


_WAKE_WIDE = _k(
    True,
    "",
    "kernel/sched/fair.c wake_wide / record_wakee: since v3.10 ('sched: Implement smarter "
    "wake-affine logic', 62470419e993, 2013); the rule modelled is the v4.3+ form ('sched/fair: Beef up "
    "wake_wide()', 63b0e9edceec, 2015)",
)
_NO_WAKE_WIDE = _k(False, "", "no wake_wide before v3.10 (2013): every wake-up tried wake_affine")


#: the group load calc_group_shares weighs a VM's group entity by: PELT's average (v3.8+)
_GROUP_LOAD_PELT = _k(
    32_768_000,
    "ns",
    "PELT halves a load's weight every LOAD_AVG_PERIOD = 32 periods of 1024 us (kernel/sched/pelt.c; "
    "9d85f21c94f7 'sched: Track the runnable average on a per-task entity basis', v3.8), the cfs_rq load_avg "
    "that calc_group_shares / calc_cfs_shares reads for the VM's load on the other CPUs (kernel/sched/fair.c); "
    "this CPU's load is max(now, average) as since v4.15, where v3.8-v4.14 took its load now",
)
#: before PELT (v3.2-v3.7): a windowed average
_GROUP_LOAD_WINDOW = _a(
    10_000_000,
    "ns",
    "before PELT, calc_cfs_shares read each CPU's load_contribution, the load averaged over a window that "
    "halves past 2 x sysctl_sched_shares_window = 20 ms (update_cfs_load, kernel/sched/fair.c v3.2-v3.7): "
    "an exponential with a 10-ms half-life stands for that 10-20 ms window",
)


def _host_model(cfs: bool, busy_factor: int, idle: Param, wake_wide: Param = _WAKE_WIDE) -> dict[str, Param]:
    out = {
        "tick_skew": _k(
            False,
            "",
            "skew_tick=0 by default: every CPU ticks on the jiffy boundary "
            "(kernel/time/tick-sched.c tick_setup_sched_timer, 'synchronized mode')",
        ),
        "seeded_ties": _a(
            True,
            "",
            "real CPUs never see exact ties of scheduling keys; a seeded rank per task "
            "stands for the kernel's enqueue order (the task index made every CPU prefer one VM)",
        ),
        "wakeup_ipi_ns": _a(
            1_500,
            "ns",
            "~1-2 us for a cross-core wake-up IPI and its handler on a Xeon; no figure for the sources' machines",
        ),
        "wakeup_jitter": _a(0.5, "", "wake-up latencies vary by interrupt timing and idle-state depth; +-50 % chosen"),
        "idle_states": idle,
        "noise": _a(
            HostNoise.typical(),
            "",
            "HostNoise.typical(): a trickle of kernel threads (50/s x 10 us per CPU) "
            "and VMM I/O (200/s x 20 us per VM); order-of-magnitude choices, see its docstring",
        ),
        "wake_placement": _k(
            "select_task_rq_fair", "", "kernel/sched/fair.c select_task_rq_fair: wake_affine, select_idle_sibling"
        ),
        "load_balance": _k(True, "", "kernel/sched/fair.c rebalance_domains / load_balance / newidle_balance"),
        "wake_wide": wake_wide,
        "lb_busy_factor": _k(busy_factor, "", "kernel/sched/topology.c sd_init: busy_factor 32, 16 from v5.10"),
        "migration_cost_ns": _k(500_000, "ns", "sysctl_sched_migration_cost = 500000 (kernel/sched/fair.c)"),
        "start_placement": _a(
            "shuffled",
            "",
            "no kernel rule starts vCPU g on CPU g mod P: the map a run starts from "
            "comes from fork placement (kernel/sched/fair.c sched_balance_find_dst_cpu) and the "
            "wake-up placements of guest boot, which depend on their timing; a seeded balanced "
            "shuffle stands for it (the index map paired VM k with VM k + P/vcpus on the same CPUs)",
        ),
        "smt_speed_pct": _h(
            65,
            "%",
            "two busy Hyper-Threads give a core 'up to 30 %' more throughput: Marr et al., "
            "'Hyper-Threading Technology Architecture and Microarchitecture', Intel Technology "
            "Journal 6(1), 2002; one figure for every era (used only with threads_per_core > 1)",
        ),
    }
    if cfs:
        out["scheduler"] = _k(
            "cfs",
            "",
            "the CFS fair class of kernel/sched/fair.c before v6.6; Host.cfs holds the "
            "kernel's sysctl defaults (6 / 0.75 / 1 ms, log scaling)",
        )
        out["cfs"] = _a(
            Cfs(vm_groups=True),
            "",
            "each VM's threads in their own task group (CONFIG_FAIR_GROUP_SCHED): libvirt runs a VM in its "
            "own cgroup with the default cpu.shares of 1024 ('Control Groups Resource Management', libvirt "
            "project, https://libvirt.org/cgroups.html), the same set-up the 6.x era's yield_scope assumes; "
            "the sources do not say how their VMs were started. Host.cfs's other fields are the kernel's "
            "sysctl defaults",
        )
    return out


_DEFAULT_AFFINITY_NOTE = "host.affinity and background are the published set-up of each case, not era values"


def _hp_model(shrink: int, max_ns: int = 200_000) -> dict[str, Param]:
    return {
        "max_ns": _k(max_ns, "ns", "halt_poll_ns = KVM_HALT_POLL_NS_DEFAULT (x86)"),
        "grow": _HP_GROW,
        "grow_start_ns": _HP_GROW_START,
        "shrink": _k(shrink, "", "halt_poll_ns_shrink (virt/kvm/kvm_main.c): 0 before ~v6.8, 2 since"),
    }


def _common_ple(grow: Param, max_: Param) -> dict[str, Param]:
    return {"enabled": _ENABLED, "kind": _VMX, "window": _WINDOW, "grow": grow, "shrink": _SHRINK, "max": max_}


def _workload(spin: Param) -> dict[str, Param]:
    return {"spin_threshold": _SPIN_THRESHOLD, "spin_iter_cycles": spin, "guest_slice_ns": _GUEST_SLICE}


#: Linux 3.5-3.6 on Westmere-class Xeons: the 2012 directed-yield threads ([S1], [S4])
ERA_2012 = Era(
    name="2012-3.x",
    kernel="Linux 3.5-3.6 host and guest (CFS), KVM with the 2011 yield_to directed yield",
    hardware="Westmere-class Xeons: the sources' 32-core host and 80-thread (4 x 10 x 2) host",
    host={
        "tick_ns": _TICK,
        "base_slice_ns": _SLICE,
        "wakeup_preemption": _WAKE,
        "next_buddy": _CFS_BUDDY,
        "yield_penalty": _CFS_YIELD,
        "yield_to_esrch": _k(False, "", "yield_to() took both run-queue locks before the 2013 -ESRCH bail-out"),
        "tsc_khz": _a(2_400_000, "kHz", "2.4 GHz, the nominal clock of Westmere-EX Xeons; the sources give no clock"),
        "group_load_half_life_ns": _GROUP_LOAD_WINDOW,
        **_host_model(True, 32, _IDLE_NHM, _NO_WAKE_WIDE),
    },
    ple=_common_ple(
        _k(0, "", "fixed window: ple_window_grow arrived with the dynamic PLE window (v3.18, 2014)"),
        _k(4096, "cycles", "fixed window (no growth before v3.18)"),
    ),
    pv={
        "steal_time": _NO_STEAL,
        "sched_yield": _NO_SCHED_YIELD,
        "apicv": _NO_APICV,
        "placement": _PLACEMENT,
        "guest_idle_poll_ns": _GUEST_POLL,
        "kick_yield": _NO_KICK_YIELD,
        "tlb_flush": _NO_PV_TLB,
        "send_ipi": _NO_PV_IPI,
    },
    halt_poll={"policy": _k("off", "", "no host halt polling before v4.0 (halt_poll_ns, 2015)")},
    workload=_workload(_SPIN_OLD),
    guest={
        "lock_kind": _k("ticket", "", "ticket spinlocks in 3.x guests (pv ticketlocks came in v3.12, 2013)"),
        "policy": _k(P.dy_eligible(), "", "virt/kvm/kvm_main.c kvm_vcpu_on_spin with dy_eligible (v3.6, 2012)"),
        "vcpu_is_preempted": _NO_VCPU_PREEMPTED,
        "load_balance": _GUEST_LB,
        **_guest_wake(_GUEST_NO_WAKE_WIDE, _GUEST_NO_RECENT, _GUEST_SCAN_FULL_3X, _GUEST_LLC_SOCKETS),
    },
    halt_poll_model=_hp_model(0, 0),
)

#: Linux 4.2-4.3 on Haswell-EP Xeons: the 2015 dynamic halt-polling work ([S5])
ERA_2015 = Era(
    name="2015-4.x",
    kernel="Linux 4.2-4.3 (CFS, qspinlock with pv, dynamic PLE window, dynamic halt polling)",
    hardware="Haswell-EP Xeons",
    host={
        "tick_ns": _TICK,
        "base_slice_ns": _SLICE,
        "wakeup_preemption": _WAKE,
        "next_buddy": _CFS_BUDDY,
        "yield_penalty": _CFS_YIELD,
        "yield_to_esrch": _ESRCH,
        "tsc_khz": _a(2_300_000, "kHz", "2.3 GHz, a Haswell-EP Xeon's nominal clock; the sources give no clock"),
        "group_load_half_life_ns": _GROUP_LOAD_PELT,
        **_host_model(
            True,
            32,
            _a(
                _IDLE_NHM.value,
                "ns",
                "Haswell-EP's own intel_idle table was not checked here; "
                f"the Nehalem/Westmere one stands in ({_IDLE_NHM.source})",
            ),
        ),
    },
    ple=_common_ple(
        _k(2, "", f"KVM_DEFAULT_PLE_WINDOW_GROW = 2 (dynamic PLE window, v3.18; {_SPEC_PLE})"),
        _k(4294967295, "cycles", "ple_window_max: UINT_MAX today; the v3.18 cap is not verified here"),
    ),
    pv={
        "steal_time": _NO_STEAL,
        "sched_yield": _NO_SCHED_YIELD,
        "apicv": _APICV,
        "placement": _PLACEMENT,
        "guest_idle_poll_ns": _GUEST_POLL,
        "kick_yield": _NO_KICK_YIELD,
        "tlb_flush": _NO_PV_TLB,
        "send_ipi": _NO_PV_IPI,
    },
    halt_poll={
        "policy": _k("block-time", "", "block-time dynamic halt polling (aca6ff29c406, v4.3)"),
        "max_ns": _HP_MAX,
        "grow": _HP_GROW,
        "grow_start_ns": _HP_GROW_START,
        "shrink": _HP_SHRINK_OLD,
    },
    workload=_workload(_SPIN_OLD),
    guest={
        "lock_kind": _k("pv_queued", "", "qspinlock with the pv slow path (v4.2, 2015)"),
        "policy": _k(P.dy_eligible(esrch_budget=3), "", "kvm_vcpu_on_spin with dy_eligible and the -ESRCH budget of 3"),
        "lock_model": _LOCKS_KERNEL,
        "pv_wait_early": _k(
            "never",
            "",
            "no wait-early before v4.5 (cd0272fab785 'locking/pvqspinlock: Queue node adaptive spinning'): a queue "
            "node halts after its SPIN_THRESHOLD iterations",
        ),
        "pv_lock_steal": _STEAL_NONE,
        "vcpu_is_preempted": _NO_VCPU_PREEMPTED,
        "load_balance": _GUEST_LB,
        **_guest_wake(_GUEST_WAKE_WIDE, _GUEST_NO_RECENT, _GUEST_SCAN_FULL_3X, _GUEST_LLC_SOCKETS),
    },
    halt_poll_model=_hp_model(0),
)


def _ple_dynamic() -> dict[str, Param]:
    """The dynamic PLE window of 5.x and later (VMX defaults)."""
    return _common_ple(
        _k(2, "", f"KVM_DEFAULT_PLE_WINDOW_GROW = 2 ({_SPEC_PLE})"),
        _k(4294967295, "cycles", f"KVM_VMX_DEFAULT_PLE_WINDOW_MAX = UINT_MAX ({_SPEC_PLE})"),
    )


_PREEMPTED_EVERY_PUT = _k(
    "every_put",
    "",
    "kvm_arch_vcpu_put called kvm_steal_time_set_preempted at every put (arch/x86/kvm/x86.c, v4.10 to v5.18): a vCPU "
    "blocked in HLT reads as preempted until it enters the guest again; changed by 54aa83c90198 'KVM: x86: do not set "
    "st->preempted when going back to user space' and 6cd88243c7e0 (v5.19, 2022)",
)
_PREEMPTED_BOUNDARY = _k(
    "instruction_boundary",
    "",
    "kvm_arch_vcpu_put sets the byte only when vcpu->preempted, at an instruction boundary (54aa83c90198 and "
    "6cd88243c7e0, v5.19, 2022; arch/x86/kvm/x86.c)",
)


_YIELD_BAILOUT = _k(
    True,
    "",
    "kvm_sched_yield returns at once when single_task_running() ('KVM: X86: Bail out of direct yield in case of "
    "under-committed scenarios', Wanpeng Li, 2021, v5.13; arch/x86/kvm/x86.c)",
)
_NO_YIELD_BAILOUT = _k(
    False,
    "",
    "kvm_sched_yield called kvm_vcpu_yield_to whenever the target was ready (266e85a5ec91 / the PV sched yield of "
    "v5.2); the single_task_running() bail-out came in v5.13 (2021)",
)


def _pv_5x_on(preempted_byte: Param = _PREEMPTED_BOUNDARY, bailout: Param = _YIELD_BAILOUT) -> dict[str, Param]:
    """The pv features of a 5.x-and-later guest on KVM (every switch on)."""
    return {
        "preempted_byte": preempted_byte,
        "yield_single_task_bailout": bailout,
        "steal_time": _STEAL,
        "sched_yield": _SCHED_YIELD,
        "apicv": _APICV,
        "placement": _PLACEMENT,
        "guest_idle_poll_ns": _GUEST_POLL,
        "kick_yield": _KICK_YIELD,
        "tlb_flush": _PV_TLB,
        "send_ipi": _PV_IPI,
    }


def _halt_poll_block_time(shrink: Param) -> dict[str, Param]:
    """Block-time dynamic halt polling with the module defaults and ``shrink``."""
    return {
        "policy": _k("block-time", "", "block-time dynamic halt polling (virt/kvm/kvm_main.c kvm_vcpu_halt)"),
        "max_ns": _HP_MAX,
        "grow": _HP_GROW,
        "grow_start_ns": _HP_GROW_START,
        "shrink": shrink,
    }


def _era_5x(
    name: str,
    kernel: str,
    hardware: str,
    tsc: Param,
    busy_factor: int,
    wait_early: Param,
    bailout: Param,
    policy: Param,
    programs: Mapping[str, Param] | None = None,
) -> Era:
    return Era(
        name=name,
        kernel=kernel,
        hardware=hardware,
        host={
            "tick_ns": _TICK,
            "base_slice_ns": _SLICE,
            "wakeup_preemption": _WAKE,
            "next_buddy": _CFS_BUDDY,
            "yield_penalty": _CFS_YIELD,
            "yield_to_esrch": _ESRCH,
            "tsc_khz": tsc,
            "group_load_half_life_ns": _GROUP_LOAD_PELT,
            **_host_model(True, busy_factor, _IDLE_SKX),
        },
        ple=_ple_dynamic(),
        pv=_pv_5x_on(_PREEMPTED_EVERY_PUT, bailout),
        halt_poll=_halt_poll_block_time(_HP_SHRINK_OLD),
        workload=_workload(_SPIN_SKL),
        guest={
            "lock_kind": _k("pv_queued", "", "qspinlock with the pv slow path (arch/x86/kernel/kvm.c)"),
            "policy": policy,
            "lock_model": _LOCKS_KERNEL,
            "pv_wait_early": wait_early,
            "pv_lock_steal": _STEAL_HYBRID,
            "vcpu_is_preempted": _VCPU_PREEMPTED,
            "load_balance": _GUEST_LB,
            **_guest_wake(_GUEST_WAKE_WIDE, _GUEST_RECENT, _GUEST_SCAN_SIS_PROP, _GUEST_LLC_SOCKETS),
        },
        halt_poll_model=_hp_model(0),
        programs=programs or {},
    )


#: The 2019 ebizzy -M rows: the hold of a record's LRU-lock sections (their
#: count derived from the 5.2 kernel's constants, presets.EBIZZY_2019_LRU_SECTIONS),
#: which no source gives, sets how long a queue of lock waiters with interrupts
#: off grows, and so how often a shootdown waits on a halted, kicked waiter, the
#: chain every 2019 row turns on. Fitted on the boost-ready commit's own table.
BOOST2019_READY = CalibrationSet(
    name="boost2019_ready",
    profile="2019-5.x",
    cases=("boost_ready2019_ebizzy_1vm", "boost_ready2019_ebizzy_2vm", "boost_ready2019_ebizzy_3vm"),
    grid={
        # a pagevec of 15 LRU adds or a batch of 32 frees: from ~15-20 ns a page (cache-hot
        # list and flag updates) to ~100-200 ns a page (cold struct pages, memcg charges)
        "programs.ebizzy_lru_hold_ns": (250, 500, 750, 1_000, 1_500, 2_000, 3_000),
    },
    rule=(
        "the three ebizzy -M rows of d73eb57b80b9's own table (1-3 VMs of 80 vCPUs, the 'ready' gate against "
        "'preempted'), declared on 2026-12-07 before this fit; held out: the same commit's two desktop rows, the "
        "three queue-head rows (266e85a5ec91) and the three rows of the revert 89340d0935c9, all of the same "
        "workload. Declared after earlier runs, and said so: on 2026-12-07 (0.3.24) 13-section presets at 1 and "
        "2 us were run on every boost row (with the queue-head yield then wrongly on in the boost-ready rows), and "
        "the revert rows ran once with the one-section preset when they were registered. Declared with the set: "
        "a candidate under which the 1-VM row's base (the anchor whose rate derives the record's work, "
        "21,443 records/s) falls more than 5 % contradicts that derivation and is not adopted"
    ),
    settings={"seeds": 3, "duration_scale": 1.0},
    adopted=True,
    outcome=(
        "refitted 2026-12-07 after the guest's PV qspinlock gained the hybrid unfair loop of v4.15 "
        "(Guest.pv_lock_steal = 'hybrid', 0.3.28; benches/calibrate_costs.py --set boost2019_ready, 7 candidates, "
        "165 s on the project's 2-CPU machine at load 2.8): 2 us ranks first (3 of 3 directions, 3 within 2x), "
        "1.5 us and 3 us next, but under each of them the 1-VM anchor's base falls 11-53 % (750 ns -12 %, 1 us "
        "-7 %, 1.5 us -11 %, 2 us -45 %, 3 us -53 %; 2 seeds, 40 ms), which the declared rule refuses; of the two "
        "holds the rule admits (250 and 500 ns, base -0.5 % at both) 500 ns ranks first (mean log error 1.386 against "
        "1.983): 2 and 3 VMs +56.5 % and +17.5 % against +186 % and +72 % (5 seeds, nominal lengths), the 1-VM "
        "row 0.0 % against +9.7 %. Adopted: no robustness probe reads the value. The first fit (0.3.27, the "
        "one-attempt steal) chose 250 ns with the set's rows at +161 % and +75 %: new waiters then queued behind "
        "a halted head, lengthening the chain of interrupt-off waiters the ready gate breaks"
    ),
)

_EBIZZY_LRU_HOLD = _fitted(
    BOOST2019_READY,
    "programs.ebizzy_lru_hold_ns",
    500,
    "ns",
    "the assumption of 1 us, the mean hold of one LRU-lock section of an ebizzy -M record (15 LRU adds or 32 "
    "frees under lru_lock, ~70 ns a page), for which no cited source gives a figure",
)

#: Linux 5.2-5.3 on Skylake-SP Xeons: the 2019 boost patches
ERA_2019 = _era_5x(
    "2019-5.x",
    "Linux 5.2-5.3 (CFS, pv sched yield, the ready gate from v5.3)",
    "Skylake-SP Xeons (the sources' 2 x 20 x 2 = 80-thread host)",
    _a(2_400_000, "kHz", "2.4 GHz, a 20-core Skylake-SP Xeon's nominal clock; the sources give no clock"),
    32,
    _k(
        "prev_halted_or_preempted",
        "",
        "75437bb304b2 'locking/pvqspinlock: Don't wait if vCPU is preempted' (2019): pv_wait_early also on "
        "vcpu_is_preempted(prev); the 2019 guests ran with it until its revert 89340d0935c9 (Oct 2019, 5.4 and stable)",
    ),
    _NO_YIELD_BAILOUT,
    _k(
        P.upstream(user_mode_irq_boost=False),
        "",
        "kvm_vcpu_on_spin with the vcpu->ready gate (v5.3 on, virt/kvm/kvm_main.c); its kernel-mode filter skips a "
        "candidate preempted in guest user mode even with a posted interrupt pending until 52acd22faa1a 'KVM: "
        "Boost vCPU candidate in user mode which is delivering interrupt' (v5.13)",
    ),
    programs={"ebizzy_lru_hold_ns": _EBIZZY_LRU_HOLD},
)
#: The 2021 pcpu_is_idle table's barrier programs: one thread's work between
#: two barriers, which no source gives, sets how often threads released by a
#: barrier are placed (the step the table's preset runs in). Fitted on PARSEC's
#: own barrier programs, chosen as "one suite's rows" before the fit; the
#: SPLASH-2x programs of the same table (the ocean rows with the same preset,
#: volrend's task-queue frames of one step of work each) and fluidanimate
#: (fine-grained locks, which do not read the value) are held out.
PARSEC2021_BARRIER = CalibrationSet(
    name="parsec2021_barrier",
    profile="2021-5.14",
    cases=("pcpu_is_idle2021_bodytrack", "pcpu_is_idle2021_streamcluster"),
    grid={
        # a fine-grained loop's chunk (tens of us) to a coarse phase (a millisecond)
        "programs.parsec_step_ns": (25_000, 50_000, 100_000, 150_000, 200_000, 300_000, 500_000, 1_000_000),
    },
    rule=(
        "the barrier-synchronised rows of PARSEC's own programs in the 2021 pcpu_is_idle table (bodytrack, "
        "streamcluster), chosen before any fit; the SPLASH-2x programs of the same table held out (ocean_cp and "
        "ocean_ncp, the same barrier preset; volrend, task-queue frames of one step of work each, the check that "
        "does not share the preset) with fluidanimate (fine-grained locks, which do not read the value)"
    ),
    settings={"seeds": 3, "duration_scale": 1.0},
    adopted=True,
    outcome=(
        "fitted 2026-12-07 (benches/calibrate_costs.py --set parsec2021_barrier, 8 candidates, 2 s on the "
        "project's 2-CPU machine): the two rows share one configuration and bracket it (published -57.3 % and "
        "-84.2 %), so every step from 25 to 150 us puts both within 2x with the same mean log error (0.193); "
        "the tie goes to the candidate nearest the documented 500 us (calibration.fit's departure), 150 us. "
        "Steps of 200 us and longer give less than bodytrack's change (-55 % at 200 us, -39 % at 300 us, "
        "-17 % at 500 us) and 1 ms the wrong sign, so the assumption ranked 7th of 8 (2 directions, 0 within "
        "2x). Adopted: no robustness probe reads the programs value, so none can change"
    ),
)

_PARSEC_STEP = _fitted(
    PARSEC2021_BARRIER,
    "programs.parsec_step_ns",
    150_000,
    "ns",
    "the assumption of 500 us, one thread's work between two barriers of the 2021 PARSEC runs (simlarge inputs "
    "on 16 threads), for which no cited source gives a figure",
)

#: Linux 5.14 on Cascade Lake-class Xeons: the 2021 pcpu_is_idle proposal
ERA_2021 = _era_5x(
    "2021-5.14",
    "Linux 5.14 (CFS)",
    "Cascade Lake-class Xeons (the source's 2 x 28 x 2 host)",
    _a(2_000_000, "kHz", "2.0 GHz, a 28-core Cascade Lake Xeon's nominal clock; the source gives no clock"),
    16,
    _WAIT_EARLY,
    _YIELD_BAILOUT,
    _k(
        P.upstream(),
        "",
        "kvm_vcpu_on_spin with the vcpu->ready gate (v5.3 on) and the user-mode candidate with a pending posted "
        "interrupt boosted (52acd22faa1a, v5.13; virt/kvm/kvm_main.c)",
    ),
    programs={"parsec_step_ns": _PARSEC_STEP},
)
#: Linux 6.19+ (EEVDF): today's kernels
ERA_6X = Era(
    name="6.x",
    kernel="Linux 6.19+ (EEVDF: PICK_BUDDY since v6.14, forfeit-on-yield since v6.19 and stable 6.12.63 / 6.18.2; "
    "the 2025 last_boosted fix)",
    hardware="current Xeons (Sapphire Rapids class)",
    host={
        "tick_ns": _TICK,
        "base_slice_ns": _SLICE,
        "wakeup_preemption": _WAKE,
        "next_buddy": _k(
            "eligible",
            "",
            "kernel/sched/fair.c pick_next_entity(): sched_feat(PICK_BUDDY) (default on) takes an eligible ->next, "
            "2a77e4be12cb 'sched/fair: Untangle NEXT_BUDDY and pick_next_task()' (v6.14; before it, v6.6-v6.13, "
            "->next was picked only under NEXT_BUDDY, off by default)",
        ),
        "yield_penalty": _k(
            "vruntime",
            "",
            "kernel/sched/fair.c yield_task_fair(): an eligible yielder's vruntime jumps to its deadline, deadline += "
            "slice, 79104becf42b 'sched/fair: Forfeit vruntime on yield' (v6.19; stable 6.12.63, 6.18.2; before it, "
            "from 147f3efaa241 in v6.6, only deadline += slice)",
        ),
        "yield_scope": _a(
            "vm_group",
            "",
            "each VM's threads in their own task group: libvirt runs a VM in its own cgroup "
            "(machine.slice/machine-qemu-N-name.scope, per-vCPU groups under it; 'Control Groups Resource "
            "Management', libvirt project, https://libvirt.org/cgroups.html), and yield_task_fair() acts on "
            "task_cfs_rq(curr) while set_next_buddy() walks the hierarchy (kernel/sched/fair.c)",
        ),
        "vm_groups": _a(
            True,
            "",
            "the same task groups built as the kernel schedules them (CONFIG_FAIR_GROUP_SCHED under EEVDF, "
            "kernel/sched/fair.c v6.6+): a group entity per VM and CPU weighted by calc_group_shares, every EEVDF "
            "rule level by level; libvirt runs a VM in its own cgroup with the default cpu.shares of 1024 "
            "('Control Groups Resource Management', libvirt project, https://libvirt.org/cgroups.html); the "
            "sources do not say how their VMs were started",
        ),
        "yield_to_esrch": _ESRCH,
        "tsc_khz": _a(2_100_000, "kHz", "2.1 GHz (the simulator default), a current Xeon's nominal clock"),
        "group_load_half_life_ns": _GROUP_LOAD_PELT,
        "slice_check_on_wakeup": _k(
            True,
            "",
            "kernel/sched/fair.c enqueue_entity() -> update_curr() -> update_deadline(): a running task whose slice "
            "is used up gets a new deadline and resched_curr() at the next enqueue on its CPU, not only at the tick "
            "(147f3efaa241 'sched/fair: Implement an EEVDF-like scheduling policy', v6.6)",
        ),
        "run_to_parity": _k(
            True,
            "",
            "kernel/sched/features.h RUN_TO_PARITY (default true): pick_eevdf() keeps an eligible curr until its "
            "protected slice is used (set_protect_slice() at the pick; with equal slices up to the deadline), and "
            "check_preempt_wakeup_fair() preempts only when pick_eevdf() takes the woken task (63304558ba5d "
            "'sched/eevdf: Curb wakeup-preemption', v6.6; the vprot form of 'sched/fair: Limit run to parity to "
            "the min slice of enqueued entities', Vincent Guittot, 2025, is the same for equal slices)",
        ),
        "delay_dequeue": _k(
            True,
            "",
            "kernel/sched/features.h DELAY_DEQUEUE and DELAY_ZERO (default true): a task blocking with negative lag "
            "stays queued until eligible, then leaves with its lag clipped to 0 (152e11f6df29 'sched/fair: "
            "Implement delayed dequeue', v6.12); woken while delayed, it is dequeued and takes the regular "
            "wake-up path ('sched: Change ttwu_runnable() vs sched_delayed', Peter Zijlstra, v6.17)",
        ),
        "place_lag": _k(
            "kernel",
            "",
            "kernel/sched/fair.c place_entity() with PLACE_LAG (kernel/sched/features.h, default true): the saved "
            "lag scaled by (load + w) / load so that V's shift as the entity joins leaves it that lag, and no lag "
            "where the queue has no entity (86bfbb7ce4f6 'sched/fair: Add lag based placement', v6.6)",
        ),
        "place_rel_deadline": _k(
            True,
            "",
            "kernel/sched/features.h PLACE_REL_DEADLINE (default true): a task dequeued without sleeping (a "
            "migration) keeps its deadline relative to its vruntime and is placed with it ('sched/fair: Avoid "
            "re-setting virtual deadline on migrations', Peter Zijlstra, v6.12)",
        ),
        **_host_model(False, 16, _IDLE_SKX),
    },
    ple=_ple_dynamic(),
    pv=_pv_5x_on(),
    halt_poll=_halt_poll_block_time(_HP_SHRINK_NEW),
    workload=_workload(_SPIN_SKL),
    guest={
        "lock_kind": _k("pv_queued", "", "qspinlock with the pv slow path (arch/x86/kernel/kvm.c)"),
        "policy": _k(P.upstream(), "", "kvm_vcpu_on_spin as of v6.19 (virt/kvm/kvm_main.c), index bug fixed"),
        "lock_model": _LOCKS_KERNEL,
        "pv_wait_early": _WAIT_EARLY,
        "pv_lock_steal": _STEAL_HYBRID,
        "vcpu_is_preempted": _VCPU_PREEMPTED,
        "load_balance": _GUEST_LB,
        **_guest_wake(_GUEST_WAKE_WIDE, _GUEST_RECENT, _GUEST_SCAN_SIS_UTIL, _GUEST_LLC_VM),
    },
    halt_poll_model=_hp_model(2),
)

#: the eras by name
ERAS: Mapping[str, Era] = MappingProxyType({e.name: e for e in (ERA_2012, ERA_2015, ERA_2019, ERA_2021, ERA_6X)})

_MIGRATION = (
    "the cost of a cache-cold migration: Host.migration_cold_core_ns / migration_cold_llc_ns exist and are 0 in "
    "every era, because the refill time depends on each workload's working set, which no source gives (the host model)"
)

#: what each era's kernels did that today's simulator cannot express, and the part of the model it needs
PENDING: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "2012-3.x": (
            _MIGRATION,
            "the 3.x select_idle_sibling (idle sched group of the LLC) is modelled by the v4.9+ idle-core scan (the host model)",
        ),
        "2015-4.x": (
            _MIGRATION,
            "halt_poll.max_ns: the era uses today's x86 KVM_HALT_POLL_NS_DEFAULT (200000); 2015-2016 kernels had "
            "a larger one (commit 14ebda33, 'KVM: x86: reduce default value of halt_poll_ns parameter', v4.6-rc; "
            "Ubuntu 16.04's 4.4 kernel defaults to 400000 ns: Launchpad bug #1724614, 'Lower the default for "
            "halt_poll_ns to 200000 ns', 2017, https://bugs.launchpad.net/ubuntu/+source/linux/+bug/1724614); "
            "the v4.3 header (arch/x86/include/asm/kvm_host.h) was not readable here, so the value is not "
            "changed (the guest model)",
        ),
        "2019-5.x": (
            _MIGRATION,
            "ebizzy -M's record: its work is derived from the 1-VM anchor (21,443 records/s on 80 CPUs, taken "
            "as CPU-bound), but the revert 89340d0935c9's reverted guest on a boosted host ran three VMs at "
            "14,000-15,500 records/s each, twice the anchor over the whole host, so the sources' runs two months "
            "apart cannot share one record cost (their guests' kernels differ, or the anchor was not CPU-bound); "
            "and a halted pv_wait waiter's cost under overcommit, which the revert rows measure and the model "
            "does not reproduce (the guest and host models)",
        ),
        "2021-5.14": (
            _MIGRATION,
            "PARSEC-like kernels of three kinds (barrier steps; fine-grained locks; task queues), not each "
            "program's own phase lengths and thread counts (the guest model)",
        ),
        "6.x": (_MIGRATION,),
    }
)


# ------------------------------------------------------- calibration sets

#: the 1x rows of the 2012 PLE source: the host-side costs of a yield storm
#: (switch, run-queue locks, candidates) act most where every vCPU has its own
#: CPU and PLE exits are pure overhead. Chosen as "one source's undercommitted
#: rows" before the fit; the same source's 2x rows, the 2012 sched-map
#: comparisons, the 2019 boost rows and the 2021 pcpu_is_idle rows, which the
#: same costs reach, are held out and check that the values generalise.
PLE2012_1X = CalibrationSet(
    name="ple2012_1x",
    profile="hardware",
    cases=(
        "ple2012_ebizzy_1x",
        "ple2012_kernbench_1x",
        "ple2012_sysbench_1x",
        "ple2012_yield_success_share_1x",
    ),
    grid={
        # context_switch() measured at 1.5-1.9 us on the project's machine, plus vcpu_put / vcpu_load
        "host.switch_ns": (1_500, 2_000, 3_000, 4_000),
        # two run-queue locks taken uncontended to contended
        "host.rq_lock_ns": (100, 300, 1_000),
        # a few cache lines per candidate to a cache-missing scan
        "ple.candidate_ns": (20, 40, 100),
    },
    rule=(
        "the undercommitted (1x) rows of one source, the 2012 PLE comparison "
        "(ple2012_*_1x), chosen before any fit; every other case held out"
    ),
    settings={"seeds": 3, "duration_scale": 0.5},
    adopted=False,
    outcome=(
        "fitted twice, adopted neither time. Second fit 2026-12-07 on the model of 0.3.24 "
        "(benches/calibrate_costs.py, 36 combinations, 151 s on the project's 2-CPU machine): rank 1 is "
        "rq_lock_ns 1000, switch_ns 4000, candidate_ns 100, with 3 of 3 directions and 3 of 4 within 2x on the "
        "set (log error 0.531; the assumptions 300 / 2000 / 40 rank 27th: 3 of 3, 2 of 4, 0.833); ranks 1-8 all "
        "take rq_lock_ns 1000 and differ in the other two within 0.04 of log error, and every chosen value is "
        "its grid's largest. calibration.adoption (2 seeds, full lengths): no probe clean under the assumptions "
        "flags its artifact. It was adopted and the full validation run (5 seeds): the set's rows right "
        "(kernbench-like 1x -40.7 % against -22 %, was -74.1 %; ebizzy-like 1x +72.5 % against +105 %), but "
        "held out 15/23 -> 10/20 directions and 10/23 -> 6/19 within 2x, gang vs PLE 8 x 20 2.35x -> 0.38x "
        "against 3.88x: at 1 us a run-queue lock makes every failed yield_to of the 2012 handler (no -ESRCH; "
        "each running candidate is tried under both locks) cost so much that the gang run, whose spinners' PLE "
        "exits find every sibling running, falls from 3.07 to 0.34 M operations/s (600 ns: 0.66 M). Reverted "
        "the same day: the fit sits at its grid's edge in every value, the sign of a value standing in for a "
        "missing mechanism, and the held-out rows it breaks are the evidence; no probe measures gang against "
        "the fair class, so the rule did not catch it (this reason was taken after the held-out run was seen, "
        "and is recorded as such). First fit, "
        "2026-12-02 (benches/calibrate_costs.py, 36 combinations, 437 s on the project's 2-CPU machine): "
        "rank 1 is rq_lock_ns 100, switch_ns 1500, candidate_ns 100, with 3 of 3 directions and 3 of 4 within "
        "2x on the set (the assumptions 300 / 2000 / 40 rank 31st: 2 of 3, 1 of 4 at the fit's settings); "
        "switch_ns barely matters (ranks 1-4 differ only in it, log error 0.754-0.775). Full validation (5 "
        "seeds, nominal lengths) with those values: the set's rows right (kernbench-like 1x -12.3 % against "
        "the published -22 %, was -71.6 %; sysbench-like 1x +0.1 % against 0, was +58.8 %); held out, "
        "direction right 15 of 26 as before and within 2x 4 of 25 against 6 (gang vs PLE 8 x 20 fell from "
        "2.32x to 1.82x, published 3.88x; sysbench-like 2x from +2.5 % to +7.3 %, published +0.8 %); and the "
        "knife_edge_ple_window probe, clean before, flagged the kernbench-like 1x comparison (-12.9 % at "
        "4096 cycles, -2.8 % at 8192). Not adopted: the robustness rule. Cheap run-queue locks and dear "
        "candidate scans put the 1x rows right by a balance that the PLE window tips, so the 1x misses are "
        "not a matter of these three values alone"
    ),
)

#: The 2015 halt-polling commit's own table: the two unpublished costs of a
#: halted vCPU's wake-up (the host's wake path, the guest's work until its next
#: halt or reply) fitted on its four expressible rows, chosen as "one source's
#: rows" before the fit; the review's rows and v4's, from the same year and the
#: same costs, are held out and check that the values carry over.
HALTPOLL2015_COMMIT = CalibrationSet(
    name="haltpoll2015_commit",
    profile="hardware",
    cases=(
        "haltpoll2015_always_vs_off_idle250hz",
        "haltpoll2015_dynamic_vs_off_idle250hz",
        "haltpoll2015_always_vs_off_tcp_rr",
        "haltpoll2015_dynamic_vs_off_tcp_rr",
    ),
    grid={
        # a blocked vCPU thread woken on its idle CPU: the wake-up and a context
        # switch (2-5 us) plus leaving the idle state (intel_idle's Haswell table:
        # C1 2 us, C1E 10 us, C3 33 us exit latency)
        "halt_poll_model.wake_latency_ns": (5_000, 7_500, 10_000, 15_000, 20_000, 30_000, 40_000),
        # VM entry and the guest's work from the interrupt to its next halt or
        # reply: a tick handler with its APIC-timer exits at the least, a
        # request's network stack at the most
        "halt_poll_model.wake_to_cue_ns": (5_000, 10_000, 15_000, 20_000, 25_000, 30_000, 40_000),
    },
    rule=(
        "the expressible rows of one source, the 2015 dynamic halt-polling commit's table (aca6ff29c406: an idle "
        "250 Hz guest's C0 and TCP_RR latency, always and dynamic polling against none), chosen before any fit; "
        "the review's rows and v4's held out (their no-polling baselines, 0.9 % and 1.27 % C0, are the check that "
        "a tick's cost carries over)"
    ),
    settings={"seeds": 3, "duration_scale": 1.0},
    adopted=True,
    outcome=(
        "fitted 2026-12-06 (benches/calibrate_costs.py --set haltpoll2015_commit, 49 combinations, 10 s on the "
        "project's 2-CPU machine): rank 1 is wake_latency_ns 7500 and wake_to_cue_ns 25000, with 3 of 4 "
        "directions and 4 of 4 within 2x on the set (the assumptions 10000 / 5000 rank 43rd: 3 of 4, 2 of 4); "
        "the set has two informative rows for two values (an idle 250 Hz guest's halts, 4 ms, are all longer than "
        "the poll window, so dynamic polling never grows: 1.00x whatever the costs; TCP_RR's gaps are shorter "
        "than it, so dynamic polls as always does), so the fit puts those two near the published values by "
        "construction, and the held-out rows are the test. A tick then costs the host 33 us of C0 (no polling: "
        "0.83 % of a CPU at 250 Hz), against the no-polling "
        "baselines 1.27 % (v4's 250 Hz guest) and the commit's own 1.1 %, which the fit does not score. Full "
        "validation (5 seeds): TCP_RR always / dynamic -21.7 % against -20.6 % / -21.5 % (were -60.5 %), "
        "idle 250 Hz always 7.03x against 7.30x (was 13.75x); held out, review always vs off 3.69x -> 2.01x "
        "against 2.00x (just outside 2x), v4 128.5x -> 61.3x against 11.8x (v4's reconstruction, "
        "docs/halt_polling.md), review dynamic unchanged (1.00x against 1.33x). Adopted: the robustness "
        "probes do not run the halt-polling model, so none can change"
    ),
)


#: the calibration sets by name
SETS: Mapping[str, CalibrationSet] = MappingProxyType(
    {s.name: s for s in (PLE2012_1X, HALTPOLL2015_COMMIT, PARSEC2021_BARRIER, BOOST2019_READY)}
)


def calibration_of(case_name: str, prof: CostProfile, era: Era | None = None) -> str | None:
    """The calibration set a case was fitted on under ``prof`` and its
    ``era`` (a set that one of their fitted values names, holding the case);
    None: held out."""
    params = [*prof.params().values(), *(era.params().values() if era is not None else ())]
    for p in params:
        cs = SETS.get(p.calibration) if p.calibration is not None else None
        if cs is not None and case_name in cs.cases:
            return cs.name
    return None


# ------------------------------------------------------------ cost profiles

_EXTINT_2019 = (
    "Wanpeng Li, 'KVM: LAPIC: Inject timer interrupt via posted interrupt' (commit 0c5f81dad46c, 2019): perf kvm "
    "stat on a Skylake server, EXTERNAL_INTERRUPT exits average 0.71 us (min 0.47 us); "
    "https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/commit/?id=0c5f81dad46c90792e6c3c4797131323c9e96dcd"
)
_APIC_TIMER_2016 = (
    "Wanpeng Li, '[PATCH] KVM: LAPIC: add APIC Timer periodic/oneshot mode VMX preemption timer support' (2016): "
    "~3800 cycles saved per emulated APIC-timer operation (hrtimer path vs the VMX preemption timer); "
    "https://www.mail-archive.com/linux-kernel@vger.kernel.org/msg1250388.html"
)
_HW_EXIT = _h(683, "ns", f"{_SPLITX}; consistent with 0.71 us per external-interrupt exit on Skylake: {_EXTINT_2019}")

#: the ``hardware`` cost profile: a hardware-virtualised (VMX) guest
HARDWARE_COSTS = CostProfile(
    name="hardware",
    description=(
        "a hardware-virtualised (VMX) guest; exit costs from the cited figure, the rest assumptions where no "
        "published figure was found (each says so)"
    ),
    host={
        "rq_lock_ns": _a(300, "ns", "both run-queue locks of yield_to (the simulator default; no published figure)"),
        "yield_check_ns": _a(50, "ns", "yield_to's checks before the locks (the simulator default; no figure)"),
        "switch_ns": _a(
            2_000,
            "ns",
            "a host switch to a vCPU thread: context_switch() between two processes, measured on the project's "
            "machine at 1.5-1.9 us (benches/ctx_switch.py, the two-pipe method of C. Li, C. Ding, K. Shen, "
            "'Quantifying The Cost of Context Switch', ExpCS 2007; that machine is itself a VM), plus KVM's "
            "vcpu_put / vcpu_load (VMPTRLD, user-return MSRs), for which no published figure was found; one value "
            "for every era",
        ),
    },
    ple={
        "exit_ns": _HW_EXIT,
        "candidate_ns": _a(40, "ns", "one candidate examined in kvm_vcpu_on_spin: a few cache lines (no figure)"),
    },
    pv={
        "hypercall_ns": _a(
            1500, "ns", f"a hypercall exit: the 683 ns world switch ({_SPLITX.split(',')[0]}) plus handling"
        ),
        "halt_exit_ns": _a(
            1500, "ns", "a HLT exit before blocking: the 683 ns world switch plus kvm_vcpu_halt's entry"
        ),
    },
    halt_poll_model={
        "wake_to_cue_ns": _fitted(
            HALTPOLL2015_COMMIT,
            "halt_poll_model.wake_to_cue_ns",
            25_000,
            "ns",
            "the assumption of 5000 ns: VM entry (683 ns world switch, SplitX) plus a guest's timer-tick handler, "
            f"its APIC-timer reprogramming (an exit plus ~3800 cycles of hrtimer emulation: {_APIC_TIMER_2016}) and "
            "the idle loop; no published figure for the whole tick",
        ),
        "cue_to_halt_ns": _h(683, "ns", f"the HLT exit's world switch; {_SPLITX}"),
        "cue_observe_ns": _a(200, "ns", "the model default (a spinning reader)"),
        "deliver_ns": _a(1_000, "ns", "a timer interrupt becoming pending on the host (hrtimer expiry; no figure)"),
        "poll_detect_ns": _a(200, "ns", "one iteration of the host's poll loop (the model default)"),
        "wake_latency_ns": _fitted(
            HALTPOLL2015_COMMIT,
            "halt_poll_model.wake_latency_ns",
            7_500,
            "ns",
            "the assumption of 10000 ns: a blocked vCPU thread woken on its idle CPU, wake-up and context switch "
            "(no figure)",
        ),
        "wake_jitter_ns": _a(0, "ns", "no host noise (the model default)"),
    },
)


def this_host(calibration: Any = None) -> CostProfile:
    """The ``this_host`` profile: the halt-polling costs measured by
    [`vcpulab.calibrate.halt_poll`][] (``calibration``: its result, whose
    ``.costs`` are used; None: the values measured on the project's machine,
    [`vcpulab.sim.halt_poll.MEASURED_HERE`][]). This host runs guests
    emulated (kvm_pvm, no PLE), so the main engine's exit costs cannot be
    measured here: they are the ``hardware`` values, marked so."""
    if calibration is None:
        costs = hp.MEASURED_HERE
        how = "vcpulab.calibrate.halt_poll on the project's machine (2-core EPYC VM, kvm_pvm), 2026-11-29"
        measured = {"wake_to_cue_ns", "cue_to_halt_ns", "wake_latency_ns"}
    else:
        costs = dataclasses.asdict(calibration.costs)
        how = "vcpulab.calibrate.halt_poll, this run"
        measured = {k for k, v in getattr(calibration, "costs_source", {}).items() if str(v).startswith("measured")}
    model = {
        k: Param(int(v), "ns", MEASURED, how)
        if k in measured
        else Param(int(v), "ns", ASSUMPTION, "model default, not resolved")
        for k, v in costs.items()
    }
    not_here = "not measurable on this host (guests are emulated, no PLE): the hardware profile's value"

    def _nh(p: Param) -> Param:
        return Param(p.value, p.unit, p.kind, f"{not_here}; {p.source}", calibration=p.calibration)

    return CostProfile(
        name="this_host",
        description="this host's calibration (emulated guests: ~24 us of host CPU per timer tick)",
        host={k: _nh(p) for k, p in HARDWARE_COSTS.host.items()},
        ple={k: _nh(p) for k, p in HARDWARE_COSTS.ple.items()},
        pv={k: _nh(p) for k, p in HARDWARE_COSTS.pv.items()},
        halt_poll_model=model,
    )


#: the cost profiles by name
COSTS: Mapping[str, CostProfile] = MappingProxyType({"hardware": HARDWARE_COSTS, "this_host": this_host()})


def era(name: str) -> Era:
    """The era called ``name`` (ValueError naming the known ones otherwise)."""
    try:
        return ERAS[name]
    except KeyError:
        raise ValueError(f"unknown era {name!r}; known: {', '.join(ERAS)}") from None


def eras_markdown() -> str:
    """Every era value side by side (one row per field), then each value's
    source once per distinct (value, source), as Markdown."""
    names = list(ERAS)
    fields: list[str] = []
    for e in ERAS.values():
        for k in e.params():
            if k not in fields:
                fields.append(k)

    def show(v: Any) -> str:
        return (
            v.label
            if isinstance(v, Policy) and v.kind != "dy_eligible"
            else (f"dy_eligible(esrch_budget={v.esrch_budget})" if isinstance(v, Policy) else str(v))
        )

    lines = ["| field | " + " | ".join(names) + " |", "|" + " --- |" * (len(names) + 1)]
    for f in fields:
        cells = []
        for n in names:
            p = ERAS[n].params().get(f)
            cells.append("—" if p is None else f"{show(p.value)} {p.unit}".strip())
        lines.append(f"| `{f}` | " + " | ".join(cells) + " |")
    lines += ["", "| field | value | kind | source |", "| --- | --- | --- | --- |"]
    seen: set[tuple[str, str, str]] = set()
    for f in fields:
        for n in names:
            p = ERAS[n].params().get(f)
            if p is None:
                continue
            key = (f, show(p.value), p.source)
            if key in seen:
                continue
            seen.add(key)
            lines.append(f"| `{f}` | {show(p.value)} {p.unit} | {p.kind} | {p.source} |")
    lines += [
        "",
        "Cost profiles:",
        "",
        "| profile | field | value | kind | source |",
        "| --- | --- | --- | --- | --- |",
    ]
    for prof in COSTS.values():
        for f, p in prof.params().items():
            lines.append(f"| {prof.name} | `{f}` | {p.value} {p.unit} | {p.kind} | {p.source} |")
    return "\n".join(lines)
