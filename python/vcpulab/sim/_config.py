"""Configuration objects of the simulator.

The one schema is Rust's: the serde structs of src/sim/config/, from which
[`config_schema`][vcpulab.sim.config_schema] (a JSON Schema) is generated. Each
class's fields — names, order, types, defaults — and its docstring's
``Attributes:`` section are *written from that schema* by
``python -m vcpulab._codegen`` (between the ``BEGIN/END GENERATED FIELDS``
markers; tests/test_config_schema.py fails when they are stale), so a field,
its unit, default, source and limits are stated once, in Rust. Each field's
own check (type, limits, enumerated names) runs from the schema too
(``_Base._check_fields``: a bad value raises `ValueError` naming the field,
e.g. ``"Host.n_pcpus must be >= 1, got 0"``). What is written here: each class's
summary, its methods, and the rules across fields (``warmup_ns <
duration_ns``, ``n_pcpus`` a multiple of sockets × threads, …), which Rust's
validator checks again when the config crosses into Rust as JSON.
A field Rust renamed (``Host.pcpus`` → ``Host.n_pcpus``, the schema's
``x-renamed-fields``) still takes its old name here, with a dated
DeprecationWarning (``_base.accept_renamed_fields``).
Configurations are hashable, picklable and JSON-round-trippable;
[`Config.config_hash`][vcpulab.sim.Config.config_hash] names a point stably.

Sources quoted in the docstrings: *kernel* = the upstream default named;
*[Sn]*, *[Kn]* = the public sources listed in docs/sources.md;
*assumption* = a value chosen by vcpulab where no measurement is at hand
(change it to your hardware's).

Floors, each importing only those below it (no import circle): ``_base``
(the schema, the field validators, ``_Base``); ``_workload`` (the phase
classes and ``Workload``), ``_halt_poll_config`` (``HaltPoll`` and the host's
halt-poll module parameters) and ``_policy`` (``Policy``), on it;
[`vcpulab.sim.presets`][] on ``_workload``, [`vcpulab.sim.policies`][] (the
constructors) on ``_policy``; this module (host, PLE, pv, guest, VM, the
whole config) on them all, and the home of every configuration class's name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar  # noqa: F401 (ClassVar: the phase classes' annotations, below)

from vcpulab.sim._base import (
    _NEW,
    _Base,
    _int,
    _plain_seq,
    _schema,
    accept_renamed_fields,
    max_items,
    new_field_name,
)
from vcpulab.sim._base import RUST_DEFS as RUST_DEFS
from vcpulab.sim._base import U64_MAX as U64_MAX
from vcpulab.sim._base import _field_default as _field_default
from vcpulab.sim._base import _limits as _limits
from vcpulab.sim._base import _to_plain as _to_plain
from vcpulab.sim._base import choices as choices
from vcpulab.sim._base import field_schema as field_schema
from vcpulab.sim._base import schema_of as schema_of
from vcpulab.sim._halt_poll_config import HALT_POLL_OLD_NAMES as HALT_POLL_OLD_NAMES
from vcpulab.sim._halt_poll_config import HALT_POLL_POLICIES as HALT_POLL_POLICIES
from vcpulab.sim._halt_poll_config import HaltPoll
from vcpulab.sim._halt_poll_config import halt_poll_policy as halt_poll_policy
from vcpulab.sim._policy import Policy
from vcpulab.sim._workload import _PHASES as _PHASES
from vcpulab.sim._workload import DISTS as DISTS
from vcpulab.sim._workload import LOCK_KINDS as LOCK_KINDS
from vcpulab.sim._workload import Barrier, Compute, Ipi, Lock, Phase, Recv, Send, Sleep, TaskQueue, Workload
from vcpulab.sim._workload import _phase_to_dict as _phase_to_dict
from vcpulab.sim.policies import by_name as _policy_by_name
from vcpulab.sim.presets import by_name as _workload_by_name

__all__ = [
    "IDLE_STATES_SKX",
    "Background",
    "Barrier",
    "Cfs",
    "Compute",
    "Config",
    "HaltPoll",
    "Host",
    "HostNoise",
    "HostSpeed",
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
    "config_schema",
]

# Defined on the floors below (_workload, _halt_poll_config, _policy), these
# classes keep this module as their __module__, the one they were defined in
# before #25: pickles, reprs and typing.get_type_hints name them here (and the
# names their annotations use are imported here), public as vcpulab.sim.<name>.
for _cls in (Compute, Lock, Ipi, Barrier, Sleep, Send, Recv, TaskQueue, Workload, Policy, HaltPoll):
    _cls.__module__ = __name__
del _cls


# ----------------------------------------------------------------- the schema


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a configuration, generated from the
    Rust serde structs (``_core.sim_config_schema()``): every field's type,
    default, limits and description. The dataclasses of this module take
    their limits and enumerated names from it. A fresh copy on each call."""
    return json.loads(json.dumps(_schema()))


# ------------------------------------------------------------------------ host


@dataclass(frozen=True)
class Background(_Base):
    """Background host load: one pinned host task per host CPU (kworker-like).

    Attributes:
        utilization: Fraction of its CPU each background task wants, in [0, 1). Default 0.0
            (idle host). Source: assumption.
        burst_ns: Mean length of one burst, ns (exponential). Default 200000. Source:
            assumption.
        weight: Scheduler weight of each background task, in [2, 88761] (the kernel's
            nice-to-weight table: 1024 = nice 0, 88761 = nice -20, 15 = nice 19). Default 1024.
    """

    # BEGIN GENERATED FIELDS (Background): python -m vcpulab._codegen
    utilization: float = 0.0
    burst_ns: int = 200_000
    weight: int = 1024
    # END GENERATED FIELDS


@dataclass(frozen=True)
class HostSpeed(_Base):
    """Each host CPU's speed moving between a fast and a slow state.

    A two-state process per CPU, independent across CPUs: each stretch in a
    state lasts an exponential time of the state's mean (drawn from the
    run's third RNG stream, so the run's other draws do not move when it is
    on). A vCPU's useful work (its threads' compute and lock holds, IPI
    handlers, its start) runs at its CPU's speed (times
    [`Host.smt_speed_pct`][vcpulab.sim.Host] where a sibling is busy), and
    work in progress is re-planned when the state changes; spinning,
    polling and exits keep their length, and wake-up latencies too unless
    ``host_paths`` says the state slows the host's own paths as well. Each
    CPU starts in a state drawn from the stationary shares.

    It stands for a host whose CPUs do not run at one speed: a hypervisor
    below a nested host (vcpulab's own CI machines: their emulated
    instructions cost ~1,070 ns in fast stretches of 0.2-2 s and
    ~1,400-1,800 ns in slow ones of ~0.1-0.4 s, measured by
    [`twins.speed_probe`][vcpulab.twins.speed_probe]), frequency changes,
    other tenants on a shared core or memory bus. Simplified: two levels,
    not a continuum; memoryless dwells (no period). Off by default.

    Attributes:
        fast_pct: Speed in the fast state, percent of the nominal speed (the speed at which a
            phase's `ns` is its length). Default 100.
        slow_pct: Speed in the slow state, percent of the nominal speed, at most `fast_pct`.
            Default 100.
        fast_dwell_ns: Mean length of a stretch in the fast state, ns. Default 0: the process is
            off (both dwells 0) and every CPU runs at 100 %.
        slow_dwell_ns: Mean length of a stretch in the slow state, ns. Default 0 (off).
        host_paths: The state's speed also stretches the host's own paths on the CPU: a vCPU's
            wake-up latency there (`wakeup_ipi_ns` and an idle state's exit), its context switch in
            (`switch_ns`) and a blocked halt's return (`Pv.halt_wake_ns`), as when the whole CPU
            runs slower (a hypervisor below giving it less). Default False: only the vCPUs' useful
            work (guest instructions) slows.
    """

    # BEGIN GENERATED FIELDS (HostSpeed): python -m vcpulab._codegen
    fast_pct: int = 100
    slow_pct: int = 100
    fast_dwell_ns: int = 0
    slow_dwell_ns: int = 0
    host_paths: bool = field(default=False, metadata=_NEW)
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        self._check_fields()
        if (self.fast_dwell_ns == 0) != (self.slow_dwell_ns == 0):
            raise ValueError(
                "HostSpeed.fast_dwell_ns and slow_dwell_ns must be both 0 (off) or both > 0, "
                f"got {self.fast_dwell_ns} and {self.slow_dwell_ns}"
            )
        if self.slow_pct > self.fast_pct:
            raise ValueError(f"HostSpeed.slow_pct must be <= fast_pct ({self.fast_pct}), got {self.slow_pct}")
        if self.fast_dwell_ns == 0 and (self.fast_pct, self.slow_pct) != (100, 100):
            raise ValueError(
                "HostSpeed.fast_pct and slow_pct must be 100 while the process is off (dwells 0), "
                f"got {self.fast_pct} and {self.slow_pct}"
            )

    @property
    def is_on(self) -> bool:
        """Whether the process runs (both dwells set)."""
        return self.fast_dwell_ns > 0 and self.slow_dwell_ns > 0


@dataclass(frozen=True)
class HostNoise(_Base):
    """Host noise: a process of its own, separate from [`Background`][vcpulab.sim.Background].

    Two kinds of short host work that a real host runs beside the vCPU
    threads (each a host task of weight 1024, nice 0, with Poisson arrivals
    and exponential lengths, drawn from the run's second RNG stream):

    * per-CPU kernel threads (kworker/N, ksoftirqd/N, rcuc/N, migration/N …),
      one task pinned to each host CPU;
    * one VMM I/O thread per VM (QEMU's main loop or an iothread), not
      pinned: the host places it at wake-up like an unpinned vCPU thread.

    The defaults are off (0 Hz). [`typical`][vcpulab.sim.HostNoise.typical] gives the values vcpulab
    uses for a general-purpose host; they are *chosen*, not measured (see
    its docstring for the reasons), and they are the same for every era:
    no source we know publishes per-era rates for these threads.

    Attributes:
        kthread_hz: Bursts per second of each CPU's kernel threads. Default 0.
        kthread_ns: Mean length of one kernel-thread burst, ns. Default 20000.
        vmm_io_hz: Bursts per second of each VM's VMM I/O thread. Default 0.
        vmm_io_ns: Mean length of one VMM I/O burst, ns. Default 20000.
        kthreads_per_cpu: Independent kernel-thread tasks per CPU sharing `kthread_hz` (each
            `kthread_hz / kthreads_per_cpu` arrivals per second, its own Poisson process and its own
            lag), 1-64. Default 1: one task per CPU whose arrivals join the work it already has.
            Many short tasks that each ran little keep their lag and preempt a vCPU at each wake-up;
            one task that carries them all has used its share and rarely does. Source: measured here
            (the number of short tasks of `vcpulab.twins.OtherLoad`, from
            `/proc/<pid>/task/*/schedstat`).
    """

    # BEGIN GENERATED FIELDS (HostNoise): python -m vcpulab._codegen
    kthread_hz: float = 0.0
    kthread_ns: int = 20_000
    vmm_io_hz: float = 0.0
    vmm_io_ns: int = 20_000
    kthreads_per_cpu: int = field(default=1, metadata=_NEW)
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        self._check_fields()
        for kind in ("kthread", "vmm_io"):
            hz, ns = getattr(self, f"{kind}_hz"), getattr(self, f"{kind}_ns")
            if hz * ns > 0.5e9:
                raise ValueError(
                    f"HostNoise.{kind}_hz * {kind}_ns must be <= 0.5 s per s (half a CPU), got {hz} * {ns}"
                )

    @classmethod
    def typical(cls) -> HostNoise:
        """A trickle of host work on an otherwise idle server (chosen values).

        * kernel threads: 50 bursts/s of 10 µs per CPU (0.05 % of a CPU).
          Reason: vmstat_update runs once a second per CPU
          (``sysctl_stat_interval`` = HZ, mm/vmstat.c), RCU callback and
          grace-period work, deferred timers and writeback kworkers wake a
          few to a few tens of times per second; a kworker wake-up costs a
          few µs of context switches plus its work. Order of magnitude only.
        * VMM I/O thread: 200 bursts/s of 20 µs per VM (0.4 % of a CPU).
          Reason: an idle guest's periodic device and timer emulation
          (QEMU main loop: RTC/HPET/PIT timers, virtio notifications,
          monitor and VNC polling) wakes the main loop a few hundred times
          a second; each wake-up handles one event in a few to tens of µs.
          Order of magnitude only.
        """
        return cls(kthread_hz=50.0, kthread_ns=10_000, vmm_io_hz=200.0, vmm_io_ns=20_000)


@dataclass(frozen=True)
class Cfs(_Base):
    """Tunables of ``Host(scheduler="cfs")``, the fair class before v6.6.

    The three times are the sysctl values before scaling; the kernel
    multiplies each by a factor of the number of CPUs
    (``get_update_sysctl_factor`` in kernel/sched/fair.c: with the default
    ``SCHED_TUNABLESCALING_LOG``, 1 + ilog2(min(ncpus, 8)), i.e. ×4 from 8
    CPUs on: 24 ms, 3 ms and 4 ms). Defaults are the kernel's of v2.6.39 …
    v6.5 (``sysctl_sched_latency = 6000000ULL``,
    ``sysctl_sched_min_granularity = 750000ULL``,
    ``sysctl_sched_wakeup_granularity = 1000000UL``).

    Attributes:
        latency_ns: sysctl_sched_latency, ns, unscaled. Default 6000000.
        min_granularity_ns: sysctl_sched_min_granularity, ns, unscaled. Default 750000.
        wakeup_granularity_ns: sysctl_sched_wakeup_granularity, ns, unscaled. Default 1000000.
        tunable_scaling: `"log"` (default), `"linear"` (factor min(ncpus, 8)) or `"none"`
            (factor 1).
        gentle_fair_sleepers: GENTLE_FAIR_SLEEPERS (kernel default True): a waking task's
            sleeper credit in `place_entity` is half of sched_latency instead of all of it.
        last_buddy: LAST_BUDDY (kernel default True): a task preempted by a wake-up becomes the
            last buddy when nr_running >= sched_nr_latency.
        vm_groups: Each VM's threads in their own task group, one level below the root cfs_rq
            (CONFIG_FAIR_GROUP_SCHED, as libvirt runs each VM in its own cgroup with the default
            cpu.shares of 1024, https://libvirt.org/cgroups.html): a VM's group entity gets 1024 ·
            (its load on this CPU / its load on all CPUs) of weight (`calc_group_shares`), so VMs,
            not threads, share a CPU fairly; picks, buddies, yields, ticks and wake-up preemption
            act level by level. Default False: one flat cfs_rq, as a VMM started outside any cgroup.
            See docs/simulator.md, "CFS group scheduling".
    """

    # BEGIN GENERATED FIELDS (Cfs): python -m vcpulab._codegen
    latency_ns: int = 6_000_000
    min_granularity_ns: int = 750_000
    wakeup_granularity_ns: int = 1_000_000
    tunable_scaling: str = "log"
    gentle_fair_sleepers: bool = True
    last_buddy: bool = True
    vm_groups: bool = field(default=False, metadata=_NEW)
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        self._check_fields()
        if self.min_granularity_ns > self.latency_ns:
            raise ValueError(
                f"Cfs.min_granularity_ns must be <= latency_ns ({self.latency_ns}), got {self.min_granularity_ns}"
            )

    def factor(self, ncpus: int) -> int:
        """``get_update_sysctl_factor()`` for ``ncpus`` CPUs."""
        cpus = min(max(ncpus, 1), 8)
        if self.tunable_scaling == "none":
            return 1
        if self.tunable_scaling == "linear":
            return cpus
        return 1 + cpus.bit_length() - 1


#: Idle states of an Intel Skylake-SP / Cascade Lake server CPU as
#: (exit_latency_ns, target_residency_ns): C1, C1E, C6 from the
#: ``skx_cstates`` table of drivers/idle/intel_idle.c (exit latency 2, 10,
#: 133 µs; target residency 2, 20, 600 µs).
IDLE_STATES_SKX = ((2_000, 2_000), (10_000, 20_000), (133_000, 600_000))


@dataclass(frozen=True)
class Host(_Base):
    """The host: CPUs and scheduler.

    Attributes:
        n_pcpus: The number of simulated host CPUs. Default 4. (Named `pcpus` before 0.3.7,
            which the real API uses for a list of host CPU ids; the old key is still read, with a
            deprecation.)
        scheduler: `"fair"` (EEVDF-like, v6.6+, one run queue per CPU; `"eevdf"` is the same
            scheduler), `"cfs"` (the fair class before v6.6: vruntime / min_vruntime, sched_latency
            slices, check_preempt_tick, wakeup_preempt_entity, next / last / skip buddies,
            place_entity; tunables in `cfs`), `"gang"` (all vCPUs of a VM run together in slices of
            `gang_slice_ns`; [S4]) or `"round_robin"` (vcpulab's own vCPU scheduler,
            [`vcpulab.sched`][]: one run token per CPU, handed round a FIFO queue of runnable vCPUs
            in wall-time slices of `token_slice_ns`; a halt hands it on; `yield_to` hands the
            yielder's token to a waiting candidate; the kernel's EEVDF still shares each CPU between
            the token's holder and other tasks: the twin of a run under `sched.round_robin` or
            `sched.directed_yield`), `"relaxed_co"` (the same tokens, but a vCPU whose token-holding
            time leads its slowest runnable sibling by more than `token_skew_ns` is passed over at
            every grant and handed on at its slice's end: the twin of `sched.relaxed_co`, after
            VMware ESX's relaxed co-scheduling, "The CPU Scheduler in VMware vSphere 5.1", 2013) or
            `"balance"` (one queue per CPU; the i-th vCPU of VM v waits only for CPU (i + v) mod P's
            token, so siblings never share a CPU: the twin of `sched.balance`, after Sukwong and
            Kim, "Is co-scheduling too expensive for SMP VMs?", EuroSys 2011) or `"pinned"` (one
            queue per CPU of the vCPU threads pinned there, so `affinity` must not be `"all"`; the
            twin of `sched.pinned`, the host kernel's per-CPU run queues without load balancing).
            Default `"fair"`.
        tick_ns: Scheduler tick period, ns. Default 4000000 (HZ=250, the kernel's Kconfig
            default). Slice expiry is noticed at ticks.
        base_slice_ns: EEVDF base slice, ns. Default 3000000 (kernel: sysctl_sched_base_slice
            0.75 ms × (1 + ilog2(min(ncpus, 8))) = 3 ms).
        wakeup_preemption: A woken, eligible task with an earlier deadline preempts curr.
            Default True (kernel). Simplified: no RUN_TO_PARITY.
        next_buddy: Effect of yield_to's next-buddy hint: `"always"` (CFS before v6.6),
            `"eligible"` (sched_feat(PICK_BUDDY), on since 2a77e4be12cb, v6.14; default) or
            `"never"` (v6.6-v6.13: ->next picked only under NEXT_BUDDY, off by default). Spec §1.5.
        yield_penalty: `"vruntime"` (79104becf42b "sched/fair: Forfeit vruntime on yield",
            v6.19, stable 6.12.63 / 6.18.2: an eligible yielder's vruntime jumps to its deadline,
            deadline += slice; default) or `"deadline"` (147f3efaa241, v6.6-v6.18: deadline +=
            slice). Spec §1.5.
        yield_scope: Where the EEVDF yield penalty acts. `"run_queue"` (default): all threads
            share the CPU's one fair queue, so the penalty reorders the yielder against every task
            of its CPU. `"vm_group"`: each VM's threads are in their own task group (libvirt's
            per-VM machine.slice scope; autogroup per session); yield_task_fair acts on
            task_cfs_rq(curr) and returns when the CPU runs one task, while set_next_buddy walks the
            whole hierarchy. Simplified on the flat queue: the penalty applies when every other
            runnable task of the CPU is a vCPU of the yielder's VM, and not at all otherwise.
        affinity: VCPU threads `"pinned"` one per CPU slot in a seeded, balanced random order
            (default), `"round_robin"` (vCPU g on CPU g mod P), or `"all"` (unpinned: placed at
            wake-up on the previous CPU if idle, else the first idle one; pulled by a CPU about to
            go idle). No periodic load balancing.
        gang_slice_ns: Gang-scheduling slice, ns. Default 4000000 ([S4]: "clean 4 ms slices").
        token_slice_ns: A run token's slice under vcpulab's schedulers (`"round_robin"`,
            `"relaxed_co"`, `"balance"`, `"pinned"`), wall time, ns. Default 4000000
            (`vcpulab.sched`'s default `slice_us=4000`).
        token_skew_ns: Under `scheduler="relaxed_co"`, the token-holding time by which a vCPU
            may lead its slowest runnable sibling before it is co-stopped, ns. Default 3000000
            (`sched.relaxed_co`'s default `skew_us=3000`).
        token_wake_exit_ns: Under vcpulab's schedulers, a vCPU woken from a halt first runs
            without a token, on the CPU whose token it last held: its pending interrupt handlers,
            then an exit of this many ns (the guest programs' wake bracket, a port write to
            vcpulab's scheduler), at whose end it asks for a token, as src/kvm/sched/'s `wake` is
            called (the real vCPU runs its interrupt handler and the bracket inside `KVM_RUN` before
            it exits to ask). Meanwhile it shares that CPU with the token's holder under the
            kernel's scheduler. 0: it asks at once, as it wakes (and the bracket's instructions run
            with the token). Default 0.
        token_halt_bracket: Under vcpulab's schedulers, the guest programs' halt bracket: a vCPU
            about to halt gives its token up first (a port write to vcpulab's scheduler, whose exit
            the workload's own phase carries), as src/kvm/sched/'s halt does, so KVM polls its halt
            without one: the token goes on at once, and the poll loop stops as soon as the token's
            next holder is put on the CPU (`single_task_running()`). A poll that catches the wake-up
            asks for a token as a vCPU woken from a blocked halt does (`token_wake_exit_ns`; at once
            where that is 0). Default False: the vCPU keeps its token while KVM polls its halt and
            gives it up when it blocks.
        token_slice_exit_ns: Under vcpulab's schedulers, how long after its slice's set end a
            token's slice ends, ns: the real slice ends when the holder's thread, kicked out of
            `KVM_RUN` at the deadline, is back in vcpulab's scheduler (measured on this project's
            host: 4,023-4,064 µs holds of a 4-ms slice, `twins.calibrate`'s `token_slice_exit_ns`).
            Every slice then lasts `token_slice_ns` plus a draw of it, so the CPUs' slices, which
            start together, drift apart as the real ones do. Simplified: the holder's guest runs
            until the slice's end. Default 0.
        token_slice_exit_jitter: The spread of `token_slice_exit_ns`: each slice's is a
            log-normal draw with it as the median and this as the standard deviation of its
            logarithm (capped at 50x). Default 0.0 (every slice ends `token_slice_exit_ns` late).
        token_slice_exit_cpu_spread: Each CPU's own lateness: a CPU's `token_slice_exit_ns` is
            scaled for the whole run by a log-normal factor with this standard deviation of its
            logarithm, drawn once per CPU at the start (second RNG stream). The real CPUs' slices
            end late by different means within one run (measured here, 3 vCPUs on 2 CPUs, three 1-s
            runs: per-CPU means 41 / 35, 41 / 52 and 63 / 47 µs), so their slice ends drift apart by
            1.5-4 ms in a second, where draws around one median drift them by ~0.1 ms (docs/twins.md
            item 15). Default 0.0 (one median for every CPU).
        tsc_khz: Host clock converting PLE cycles to ns, kHz. Default 2100000 (2.1 GHz, a Xeon
            of the 2012 sources' era; assumption).
        rq_lock_ns: Time a yield_to attempt holds both run-queue locks, ns (contended locks are
            waited for). Default 300 (assumption; [S1]: ~50 % host time in _raw_spin_lock under PLE
            storms).
        yield_check_ns: Cost of yield_to before the locks (the -ESRCH check), ns. Default 50
            (assumption).
        yield_to_esrch: yield_to returns -ESRCH at once when both run queues hold a single task
            (kernels since ~3.8). False models the 2011-2012 yield_to, which always took both
            run-queue locks. Default True.
        background: Optional background host load. Default: none.
        tick_skew: Per-CPU tick phase as the `skew_tick=1` boot option sets it
            (kernel/time/tick-sched.c `tick_setup_sched_timer`: CPU i's tick is offset by i ×
            (TICK_NSEC / 2) / nr_cpus). Default False: the kernel's default, every CPU ticks on the
            same jiffy boundary ("Tick operating in synchronized mode").
        seeded_ties: Break ties between equal scheduling keys by a per-task random rank drawn
            from the seed (a second RNG stream) instead of the task index. The kernel's rbtree keeps
            equal keys in enqueue order, and on real hardware exact ties do not happen: the index
            rule makes every CPU prefer the same VM. Default False.
        wakeup_ipi_ns: Latency of a vCPU wake-up on its host CPU, ns: the wake list / reschedule
            IPI's delivery (`ttwu_queue_wakelist`, `resched_curr`); it delays the woken vCPU's start
            on an idle CPU and its wake-up preemption of a busy one. Default 0 (off). Suggested
            1000-2000 (assumption: ~1 µs for a cross-core IPI on a Xeon, plus the handler's entry).
        idle_states: The host CPUs' idle states as (exit_latency_ns, target_residency_ns),
            shallowest first. A vCPU woken onto an idle CPU also waits for the exit latency of the
            deepest state whose target residency the CPU has been idle for (an idle governor that
            predicted right). Default () (off). `sim.IDLE_STATES_SKX` holds the intel_idle table of
            a Skylake-SP server.
        wakeup_jitter: Relative jitter of both wake-up latencies: with `wakeup_dist` `"uniform"`
            each is drawn uniformly in [1 - j, 1 + j] × its value; with `"lognormal"` j is the
            standard deviation of its logarithm (the value is the median). Default 0.0. Suggested
            0.5 (assumption); the twins measure it (`twins.calibrate`'s `ipi_wake_spread`).
        wakeup_dist: The distribution of a jittered wake-up latency: `"uniform"` (mean kept) or
            `"lognormal"` (median kept, a right tail). Default `"uniform"`.
        noise: Host noise (kernel threads, VMM I/O threads), see
            [`HostNoise`][vcpulab.sim.HostNoise]. Default off.
        cfs: Tunables of `scheduler="cfs"`, see [`Cfs`][vcpulab.sim.Cfs]. Default ``Cfs()``.
        sockets: Topology: sockets (each one LLC domain) × cores × SMT threads; `n_pcpus` must
            be a multiple of sockets × threads_per_core. CPU i is thread i / ncores of core i mod
            ncores (Linux's enumeration on x86 servers: siblings are ncores apart). At most
            `n_pcpus`. Default ``1``.
        threads_per_core: SMT threads per core, 1-8. Default 1. `n_pcpus` must be a multiple of
            sockets × threads_per_core. Host CPU i is thread i // ncores of core i % ncores
            (siblings ncores apart, as Linux numbers x86 servers).
        wake_placement: Where a woken unpinned thread goes: `"first_idle"` (default: the
            previous CPU if idle, else the first idle CPU after it, else the previous CPU) or
            `"select_task_rq_fair"` (the kernel's: `wake_affine` between the waker's CPU and the
            previous one, then `select_idle_sibling` — the target if idle, the previous CPU if idle
            in the same LLC, the first fully idle core of the target's LLC, its first idle CPU, else
            the target).
        load_balance: Periodic load balancing per domain (core, LLC, machine) from the tick
            (`rebalance_domains`: every sd_weight ms × `lb_busy_factor` on a busy CPU, one
            cache-cold task from the busiest CPU when it runs 2+ more tasks), nohz idle balancing
            kicked by a CPU with 2+ tasks, and newidle balancing domain by domain (smallest first).
            Default False (newidle pulls only, from the first CPU after this one that has a waiting
            task).
        lb_busy_factor: sd->busy_factor: a busy CPU balances `busy_factor` times less often
            (kernel sd_init: 32 before v5.10, 16 since). Default ``16``.
        migration_cost_ns: sysctl_sched_migration_cost, ns: a task that ran within it is
            cache-hot and periodic balancing leaves it (`task_hot`). Default 500000 (kernel).
        smt_speed_pct: Speed of a hardware thread doing a vCPU's useful work while another
            thread of its core runs something, percent of its speed alone (the work in progress is
            re-planned whenever a sibling starts or stops). Default 100 (off). Suggested 65: two
            busy threads give a core 1.3× its one-thread throughput, the "up to 30 %" of D. Marr et
            al., "Hyper-Threading Technology Architecture and Microarchitecture", Intel Technology
            Journal 6(1), 2002,
            https://www.cs.sfu.ca/~fedorova/Teaching/CMPT886/Spring2007/papers/hyper-threading.pdf
            (the same figure for every era: vcpulab has no per-generation source). Spinning, exits
            and polling are not slowed.
        speed: Each host CPU's speed as a process of its own, see
            [`HostSpeed`][vcpulab.sim.HostSpeed]. Default off (one speed).
        start_placement: The host CPU each unpinned (`affinity="all"`) vCPU thread starts on:
            `"index"` (default: vCPU g, counted over all VMs, on CPU g mod P, so that VM k shares
            its CPUs with the VMs P / vcpus apart and nothing else) or `"shuffled"` (the balanced
            slots g mod P in a seeded random order, the map that `affinity="pinned"` draws). No
            kernel rule puts vCPU g on CPU g mod P: the map a real host starts a run with comes from
            fork placement (`sched_balance_find_dst_cpu`) and the wake-up placements of guest boot
            and idle, which depend on their timing; "shuffled" stands for it (simplified: balanced,
            one draw per seed). A thread's first enqueue keeps its start CPU (`wake_up_new_task`
            places by fork balancing, not by the wake-up path; through the wake-up path in index
            order, the VMs listed first took CPUs of their own: the 2012 era's 8 x 20 VMs 0 and 1
            made 1.5-1.7x the mean). vCPU threads that never sleep keep their start CPU (load
            balancing finds nothing to move between equally loaded CPUs), so the start map decides
            which VMs share CPUs. Pinned affinities ignore it.
        migration_cold_core_ns: Cache-refill time a vCPU owes when it runs on another core of
            the same LLC than last time (its private L1 and L2 are cold), ns: its next useful work
            starts with it (the time counts as useful: the guest runs, slower). Default 0 (off). The
            kernel charges nothing for a migration; the hardware does (sysctl_sched_migration_cost
            only marks tasks cache-hot). Simplified: one figure per distance, whatever the working
            set; SMT siblings share L1/L2 and owe nothing.
        migration_cold_llc_ns: The same for a CPU in another LLC (socket), ns. Default 0 (off).
        wake_wide: `wake_wide` in `select_task_rq_fair` (kernel/sched/fair.c, since v4.6): each
            waker counts its "wakee flips" (one more when it wakes a different task than last time,
            halved every second: `record_wakee`); when the waker's and the wakee's counts are both
            at least the LLC size and one is at least LLC-size times the other, the wake-up skips
            `wake_affine` and looks for an idle CPU around the wakee's previous CPU. The waker is
            the vCPU thread of the vCPU event that makes the wake-up (an IPI, a pv kick), or the
            task running on the CPU of a tick or resched; wake-ups with no waker task (timers on an
            idle CPU) count nothing. Only with `wake_placement="select_task_rq_fair"`. Default False
            (off).
        vcpu_pcpus: The host CPU of each vCPU thread, overriding the map `affinity` draws: vCPU
            thread g (counted over all VMs) on `vcpu_pcpus[g % len]`, pinned there
            (`affinity="all"`: starting there). A run that uses some of the host's CPUs while the
            host's other threads (noise, the VMM threads) may run on the rest, as a real experiment
            pinned to part of the machine ([`vcpulab.twins`][]). Each entry < `n_pcpus`. Default ()
            (the affinity's map).
        start_gap_ns: The vCPU threads arrive one by one, ns apart, as a VMM creates them in
            turn: the order in which they first reach their CPU's run queue (fork placement, then
            the move to their pinned CPU) is a seeded random one (a stand-in for that timing), the
            gaps between arrivals are exponential with mean start_gap_ns (second RNG stream); each
            arrives on its start CPU (a new task is placed by fork balancing, which the start map
            stands for, not by the wake-up path) and may preempt as any waking task. Their first
            runs set the order of a ticket lock's queue, the host scheduler's order of them is set
            by the arrivals too, and the two need not agree (docs/twins.md). Under vcpulab's token
            schedulers the arrivals set only when the first tokens go out: at the last one, in vCPU
            order, as the real scheduler waits for every thread (src/kvm/sched/). Default 0 (every
            vCPU runnable at time 0, in index order).
        start_order: The order in which the vCPU threads arrive with `start_gap_ns > 0`:
            `"shuffled"`, a seeded random order (every order equally likely), or `"created"`, the
            VMM's creation order jittered: thread i is created after thread i - 1, an exponential
            gap of mean `start_gap_ns` later, and first reaches its CPU after its own exponential
            delay of the same mean (an assumption), so two neighbours arrive swapped about one time
            in four, as the project's real runs did (vCPU 1 before vCPU 0 in 1 of 4 runs of
            `twins.wake_placement_grid`'s cells; the twins use it). Default `"shuffled"`.
        slice_check_on_wakeup: EEVDF (`scheduler="fair"`): a wake-up onto a busy CPU notices an
            expired slice of the running task, as the kernel's `enqueue_entity` → `update_curr` →
            `update_deadline` → `resched_curr` does (kernel/sched/fair.c), and the CPU picks again.
            Default False (slice expiry noticed at ticks only).
        run_to_parity: EEVDF (`scheduler="fair"`): the kernel's `RUN_TO_PARITY` slice protection
            and wake-up rule (kernel/sched/fair.c, v6.6 on; the feature is on by default): a task
            picked to run keeps its CPU while it is eligible and has not used its slice
            (`set_protect_slice`, `protect_slice` in `pick_eevdf`); a woken task preempts only when
            `pick_eevdf` would choose it (`check_preempt_wakeup_fair`); an eligible next buddy still
            goes first (`PICK_BUDDY`). Every task has the base slice here, so the protection lasts
            to the deadline set when it was picked. Default False (every pick is the earliest
            eligible deadline; a woken task preempts when it is eligible with an earlier deadline
            than the running one).
        switch_ns: Host CPU time of a switch to a vCPU thread, ns: the host's `__schedule()` →
            `context_switch()` (registers, the address space of another VMM process) and KVM's
            preempt notifier `kvm_sched_in` → `kvm_arch_vcpu_load` (on VMX `vmx_vcpu_load`: VMPTRLD
            of the vCPU's VMCS, its host state and the user-return MSRs; kvm_sched_out's `vcpu_put`
            of the one switched out). Charged at each switch-in of a vCPU thread (from another task
            or from idle) on that CPU before the vCPU's guest code resumes, as exit time (category
            `exit_ns`); the switch cannot be preempted. Simplified: one figure for a switch between
            vCPUs of one VM and of two, and none for a switch to a non-vCPU task; the cache refill
            after it is `migration_cold_*_ns`'s, not this. 0 (default): switches cost nothing.
        delay_dequeue: EEVDF's DELAY_DEQUEUE with DELAY_ZERO (152e11f6df29 "sched/fair:
            Implement delayed dequeue", v6.12; both on by default): a task that blocks while not
            eligible (negative lag) stays on its CPU's queue and burns its negative lag off as V
            advances; once eligible it is dequeued with its lag clipped to 0; woken before that, it
            is dequeued with what is left and placed as any wakee ("sched: Change ttwu_runnable() vs
            sched_delayed", v6.17; v6.12-v6.16 requeued it in place, which is not modelled).
            Simplified: it counts as dequeued the instant V passes its vruntime, and its weight is
            left out of V meanwhile. false (default): a blocked task keeps its lag, negative or not,
            until it next runs (v6.6-v6.11). Used with `scheduler="fair"` (EEVDF) only.
        place_lag: EEVDF's `place_entity` lag rule (PLACE_LAG, kernel/sched/fair.c, v6.6 on; on
            by default). `"kernel"`: a task (or group entity) placed on a queue where other entities
            count in V gets its saved lag scaled by (W + w) / W, W their weight and w its own, so
            that V's shift as it joins leaves it the lag it saved; on a queue with no entity it
            starts at V, its lag dropped. `"saved"` (default): the saved lag as it is, on an empty
            queue too (the simulator's rule until 0.3.11). Used with `scheduler="fair"` only.
        place_rel_deadline: EEVDF's PLACE_REL_DEADLINE ("sched/fair: Avoid re-setting virtual
            deadline on 'migrations'", kernel/sched/fair.c, v6.12; on by default): a runnable task
            taken off its queue without sleeping (a load-balance or newidle migration) keeps its
            deadline's distance from its vruntime and is placed with it, instead of a new request of
            a whole slice. false (default): a new request (before v6.12). Used with
            `scheduler="fair"` only.
        vm_groups: EEVDF task groups (`CONFIG_FAIR_GROUP_SCHED`, kernel/sched/fair.c v6.6+):
            each VM's vCPU threads in their own task group, one level below the CPU's root run
            queue, as libvirt runs each VM in its own cgroup with the default cpu.shares of 1024
            ("Control Groups Resource Management", libvirt project,
            https://libvirt.org/cgroups.html). A VM's group entity on a CPU has its own vruntime,
            deadline and lag in the root's virtual time and the weight `calc_group_shares` gives it
            (1024 × its load on this CPU / its load on all CPUs); placement, eligibility,
            `pick_eevdf`, slice protection, next buddies, deadlines at the tick, wake-up preemption
            and DELAY_DEQUEUE act level by level, and yield_task_fair's penalty on the yielder's own
            group queue. Acts under `scheduler="fair"` only (CFS's groups are `Cfs.vm_groups`; gang
            and vcpulab's schedulers place the vCPUs themselves), where it needs
            `yield_scope="vm_group"`, the flat stand-in it replaces. false (default): one run queue
            per CPU. See docs/simulator.md, "EEVDF group scheduling".
        group_load_half_life_ns: The half-life of the group load average that
            `calc_group_shares` weighs each VM's group entity by (`Cfs.vm_groups`, `vm_groups`), ns.
            The kernel's PELT halves a load's weight every 32 periods of 1024 µs (`LOAD_AVG_PERIOD`,
            kernel/sched/pelt.c; v3.8+): 32768000 there. With it, a CPU's load is max(its group's
            runnable weight now, its average), and the VM's load is the other CPUs' averages as they
            last updated them plus this CPU's (`tg->load_avg`, kernel/sched/fair.c), so the weight
            follows a vCPU's halts and wake-ups slowly, not at once. 0 (default): the runnable
            weight now, on every CPU. Simplified: a continuous exponential for PELT's geometric
            series.
    """

    # BEGIN GENERATED FIELDS (Host): python -m vcpulab._codegen
    n_pcpus: int = 4
    scheduler: str = "fair"
    tick_ns: int = 4_000_000
    base_slice_ns: int = 3_000_000
    wakeup_preemption: bool = True
    next_buddy: str = "eligible"
    yield_penalty: str = "vruntime"
    yield_scope: str = field(default="run_queue", metadata=_NEW)
    affinity: str = "pinned"
    gang_slice_ns: int = 4_000_000
    token_slice_ns: int = field(default=4_000_000, metadata=_NEW)
    token_skew_ns: int = field(default=3_000_000, metadata=_NEW)
    token_wake_exit_ns: int = field(default=0, metadata=_NEW)
    token_halt_bracket: bool = field(default=False, metadata=_NEW)
    token_slice_exit_ns: int = field(default=0, metadata=_NEW)
    token_slice_exit_jitter: float = field(default=0.0, metadata=_NEW)
    token_slice_exit_cpu_spread: float = field(default=0.0, metadata=_NEW)
    tsc_khz: int = 2_100_000
    rq_lock_ns: int = 300
    yield_check_ns: int = 50
    yield_to_esrch: bool = True
    background: Background = field(default_factory=Background)
    tick_skew: bool = field(default=False, metadata=_NEW)
    seeded_ties: bool = field(default=False, metadata=_NEW)
    wakeup_ipi_ns: int = field(default=0, metadata=_NEW)
    idle_states: tuple[tuple[int, int], ...] = field(default=(), metadata=_NEW)
    wakeup_jitter: float = field(default=0.0, metadata=_NEW)
    wakeup_dist: str = field(default="uniform", metadata=_NEW)
    noise: HostNoise = field(default_factory=HostNoise, metadata=_NEW)
    cfs: Cfs = field(default_factory=Cfs, metadata=_NEW)
    sockets: int = field(default=1, metadata=_NEW)
    threads_per_core: int = field(default=1, metadata=_NEW)
    wake_placement: str = field(default="first_idle", metadata=_NEW)
    load_balance: bool = field(default=False, metadata=_NEW)
    lb_busy_factor: int = field(default=16, metadata=_NEW)
    migration_cost_ns: int = field(default=500_000, metadata=_NEW)
    smt_speed_pct: int = field(default=100, metadata=_NEW)
    speed: HostSpeed = field(default_factory=HostSpeed, metadata=_NEW)
    start_placement: str = field(default="index", metadata=_NEW)
    migration_cold_core_ns: int = field(default=0, metadata=_NEW)
    migration_cold_llc_ns: int = field(default=0, metadata=_NEW)
    wake_wide: bool = field(default=False, metadata=_NEW)
    vcpu_pcpus: tuple[int, ...] = field(default=(), metadata=_NEW)
    start_gap_ns: int = field(default=0, metadata=_NEW)
    start_order: str = field(default="shuffled", metadata=_NEW)
    slice_check_on_wakeup: bool = field(default=False, metadata=_NEW)
    run_to_parity: bool = field(default=False, metadata=_NEW)
    switch_ns: int = field(default=0, metadata=_NEW)
    delay_dequeue: bool = field(default=False, metadata=_NEW)
    place_lag: str = field(default="saved", metadata=_NEW)
    place_rel_deadline: bool = field(default=False, metadata=_NEW)
    vm_groups: bool = field(default=False, metadata=_NEW)
    group_load_half_life_ns: int = field(default=0, metadata=_NEW)
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        self._check_fields()
        if self.scheduler == "pinned" and self.affinity == "all":
            raise ValueError(
                "Host.scheduler = 'pinned' needs pinned vCPU threads: Host.affinity must be 'pinned' or "
                "'round_robin', got 'all'"
            )
        states = self.idle_states
        if isinstance(states, list):
            states = tuple(tuple(x) if isinstance(x, list) else x for x in states)
            object.__setattr__(self, "idle_states", states)
        if not isinstance(states, tuple):
            raise ValueError(
                f"Host.idle_states must be a tuple of (exit_latency_ns, target_residency_ns), got {states!r}"
            )
        prev = (0, 0)
        for i, st in enumerate(states):
            ok = (
                isinstance(st, tuple)
                and len(st) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 10**9 for x in st)
            )
            if not ok:
                raise ValueError(
                    f"Host.idle_states[{i}] must be (exit_latency_ns, target_residency_ns), ints in [0, 1e9], got {st!r}"
                )
            if st[0] < prev[0] or st[1] < prev[1]:
                raise ValueError(f"Host.idle_states[{i}] must be at least as deep as idle_states[{i - 1}], got {st!r}")
            prev = st
        _int(self, "sockets", hi=self.n_pcpus)
        if self.n_pcpus % (self.sockets * self.threads_per_core):
            raise ValueError(
                f"Host.n_pcpus ({self.n_pcpus}) must be a multiple of Host.sockets × Host.threads_per_core "
                f"({self.sockets} × {self.threads_per_core})"
            )
        pins = self.vcpu_pcpus
        if isinstance(pins, list):
            pins = tuple(pins)
            object.__setattr__(self, "vcpu_pcpus", pins)
        if not isinstance(pins, tuple):
            raise ValueError(f"Host.vcpu_pcpus must be a tuple of host CPU indices, got {pins!r}")
        most = max_items("Host", "vcpu_pcpus")
        if len(pins) > most:
            raise ValueError(f"Host.vcpu_pcpus must hold at most {int(most)} CPUs, got {len(pins)}")
        for i, c in enumerate(pins):
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < self.n_pcpus:
                raise ValueError(
                    f"Host.vcpu_pcpus[{i}] must be an int in [0, n_pcpus) = [0, {self.n_pcpus}), got {c!r}"
                )

    @classmethod
    def _field_from_plain(cls, name: str, v: Any) -> Any:
        if name == "background":
            return Background.from_dict(v)
        if name == "noise":
            return HostNoise.from_dict(v)
        if name == "speed":
            return HostSpeed.from_dict(v)
        if name == "cfs":
            return Cfs.from_dict(v)
        if name == "idle_states":
            return tuple(tuple(x) for x in v)
        if name == "vcpu_pcpus":
            return tuple(v)
        return v


# ------------------------------------------------------------------------- PLE


@dataclass(frozen=True)
class Ple(_Base):
    """Pause-loop exiting (VMX) / pause filter (SVM), [K2].

    A vCPU spinning in guest kernel mode (any mode for SVM) exits after
    ``window`` cycles of continuous spinning, pays ``exit_ns``, grows its
    window (``__grow_ple_window``), runs the VM's directed-yield policy, and
    re-enters or yields. The window shrinks (default: resets) on sched-in.

    Simplifications: the SVM pause filter counts PAUSE *instructions* and
    reloads its count when more than ``pause_filter_thresh`` cycles pass
    between two PAUSEs ([K2]); here both kinds treat the window as
    cycles of continuous spinning (a filter count maps to cycles through the
    spinner's PAUSE rate), with no threshold. Guest spinning is modelled in
    kernel mode only (every lock kind is a kernel lock), so SVM's "any CPL"
    and VMX's "CPL 0 only" never differ here.

    Attributes:
        enabled: False models KVM_X86_DISABLE_EXITS_PAUSE (no exits). Default True.
        kind: `"vmx"` (default) or `"svm"`.
        window: Initial window and shrink floor, cycles. Default 4096 (kernel
            `KVM_VMX_DEFAULT_PLE_WINDOW`; SVM: 3000).
        grow: Grow modifier; < window multiplies, else adds; 0 keeps the window fixed (kernels
            before 2014). Default 2 (kernel).
        shrink: Shrink modifier (`ple_window_shrink`, a kernel uint); 0 resets to `window` on
            sched-in. Default ``0``.
        max: Growth cap, cycles. Default 4294967295 (kernel UINT_MAX; SVM 65535).
        exit_ns: Cost of one PAUSE exit round trip, ns. Default 1000 (assumption: ~1 µs VM exit
            + entry on recent Xeons).
        candidate_ns: Cost of examining one candidate in kvm_vcpu_on_spin, ns. Default 40
            (assumption).
    """

    # BEGIN GENERATED FIELDS (Ple): python -m vcpulab._codegen
    enabled: bool = True
    kind: str = "vmx"
    window: int = 4096
    grow: int = 2
    shrink: int = 0
    max: int = 4_294_967_295
    exit_ns: int = 1000
    candidate_ns: int = 40
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        self._check_fields()
        if self.max < self.window:
            raise ValueError(f"Ple.max must be >= Ple.window ({self.window}), got {self.max}")

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
# (Policy is defined in _policy, below vcpulab.sim.policies and its constructors)

#: the policy kinds, as the schema names them (the constructors' names of vcpulab.sim.policies, and "python")
POLICY_KINDS = choices("Policy", "kind")


# -------------------------------------------------------------------------- pv


@dataclass(frozen=True)
class Pv(_Base):
    """Paravirtual features of a VM and exit costs ([S2], [S3], [K4], [K5]).

    Attributes:
        steal_time: Steal time on: the guest sees the `preempted` byte (mutex spinners stop,
            wake-up placement avoids preempted vCPUs). Default True.
        sched_yield: PV_SCHED_YIELD: a call-function IPI sender directed-yields to the first
            preempted target. Default True.
        apicv: Posted interrupts: a pending IPI makes a candidate dy_runnable. Default True.
        placement: Guest wake-up placement: `"available_idle"` (upstream `available_idle_cpu`:
            guest-idle and not `vcpu_is_preempted`), `"pcpu_is_idle"` (vcpulab's first model of the
            2021 proposal: first prefer guest-idle vCPUs whose host CPU runs nothing else, read
            live, counting a preempted one as available), `"pcpu_is_idle_rfc"` (the RFC as posted,
            "[PATCH 1-4/4] KVM: x86: Introduce .pcpu_is_idle() stub infrastructure", Tianqiang Xu,
            Dingji Li, Zeyu Mi, 31 Aug 2021,
            https://lore.kernel.org/kvm/20210831015919.13006-1-skyele@sjtu.edu.cn/: fair.c's
            `available_idle_cpu` becomes guest-idle && the vCPU's steal-time `is_idle` byte, a
            snapshot the host writes when the vCPU is put — 1 if its CPU's nr_running is <= 1 — and
            when a vCPU enters the guest — the previous vCPU on that CPU cleared, or itself set
            again; as posted the clear returns early when the byte is set, so a set byte stays set)
            or `"pcpu_is_idle_rfc_cleared"` (the same write points with a clear that clears).
            Default `"available_idle"`.
        hypercall_ns: Cost of a hypercall exit (KICK_CPU, SCHED_YIELD), ns. Default 1500
            (assumption).
        halt_exit_ns: Cost of a HLT exit before blocking, ns. Default 1500 (assumption).
        halt_wake_ns: Host CPU time of a vCPU's return from a halt that blocked, beyond the
            switch back in (`Host.switch_ns`), ns: `kvm_vcpu_block()`'s return and everything KVM
            does before the guest resumes (the preempt notifiers' `vcpu_load`, the pending
            interrupt's injection). Charged as exit time (category `exit_ns`, not preemptible) when
            the vCPU is back from the block, before its guest code resumes; a halt that polling
            caught costs nothing here. Simplified: the block's own side (the switch to idle) is
            charged here too, so a blocked halt's whole cost beyond a polled one sits on the
            wake-up's path (where a trace of this host puts nearly all of it: docs/twins.md).
            Default 0 (off; the eras leave it off: no published figure). The twins measure it on
            this host (`twins.calibrate`'s `halt_wake_ns`).
        halt_wake_jitter: The spread of `halt_wake_ns`: each return from a blocked halt costs a
            log-normal draw with `halt_wake_ns` as its median and this as the standard deviation of
            its logarithm (a right tail, capped at 50x: the emulated path around an exit varies from
            one wake-up to the next). Default 0.0 (every return costs `halt_wake_ns`). The twins
            measure it from the calibration's IPI round trips (`twins.calibrate`'s
            `halt_wake_spread`).
        guest_idle_poll_ns: Guest idle polling before HLT (cpuidle-haltpoll), ns; 0 halts at
            once. Default 0 (haltpoll is off unless the guest loads it; its own default,
            `guest_halt_poll_ns`, is 200000: "Guest halt polling", Linux kernel documentation,
            https://docs.kernel.org/virt/guest-halt-polling.html).
        guest_idle_poll_vcpus: The vCPUs (indices in the VM, ascending, each below `vcpus`) that
            idle-poll for `guest_idle_poll_ns`; the others halt at once. Empty: every vCPU, as the
            guest's cpuidle-haltpoll driver polls on every CPU. For guests that poll on some vCPUs
            only: the workers of vcpulab's wake-placement program poll their mailbox before they
            halt, and its waker (vCPU 0) halts at once. Default empty.
        guest_idle_poll_limit: What ends a guest idle poll that was interrupted (switched out,
            or an interrupt handler ran): `"clock"`, its window ends at an instant of the guest's
            clock, which runs on while the vCPU is away (the kernel's `poll_idle`,
            drivers/cpuidle/poll_state.c, checks `local_clock()`), or `"checks"`, its window is a
            number of checks, so only the time the vCPU polls counts and an interrupted poll goes on
            with the checks it has left (vcpulab's mailbox poll, `experiment.WakePlacement(poll=n)`,
            counts down n checks; the twins use it). Default `"clock"`.
        pv_spinlocks: KVM_FEATURE_PV_UNHALT offered to the guest. False: the guest's
            `kvm_spinlock_init` returns early, so its `pv_queued` locks run the `virt_spin_lock`
            test-and-set fallback (any running waiter may take a free lock, newcomers included: lock
            stealing). Default True (KVM since 3.12).
        kick_yield: KVM_HC_KICK_CPU also directed-yields to the kicked vCPU
            (`kvm_pv_kick_cpu_op` then `kvm_sched_yield`; commit 266e85a5ec9 "KVM: X86: Boost queue
            head vCPU to mitigate lock waiter preemption", Wanpeng Li, 2019). False: the kick only
            wakes (hosts before it). Default True.
        tlb_flush: KVM_FEATURE_PV_TLB_FLUSH (4.16, 2018): a TLB-shootdown IPI phase
            (`Ipi(tlb_flush=True)`) skips preempted targets, which the host flushes at their next
            sched-in (`kvm_flush_tlb_multi`). Default False (as before the option existed).
        send_ipi: KVM_FEATURE_PV_SEND_IPI (4.19, 2018): the sender makes one hypercall
            (`hypercall_ns`) for a multicast IPI instead of one ICR-write exit per target
            (`icr_write_ns` each). Default False.
        icr_write_ns: Cost of one ICR-write exit per IPI target when `send_ipi` is off, ns.
            Default 0 (sending is free, as before the option existed; an era preset sets the
            hardware figure).
        preempted_byte: When the host sets the steal-time `preempted` byte that the guest's
            `vcpu_is_preempted` reads ([K4]): `"instruction_boundary"` (5.19 on, and the stable
            kernels from 5.4 that took the fixes: only a vCPU preempted while runnable by the
            interrupt that took it out of guest mode; commits 54aa83c90198 "KVM: x86: do not set
            st->preempted when going back to user space" and 6cd88243c7e0 "KVM: x86: do not report a
            vCPU as preempted outside instruction boundaries", Paolo Bonzini, June 2022) or
            `"every_put"` (4.10 to 5.18: `kvm_arch_vcpu_put` calls `kvm_steal_time_set_preempted` at
            every put, so a vCPU blocked after HLT, or switched out after a pause-loop exit, reads
            as preempted until it enters the guest again, and `available_idle_cpu` refuses every
            halted vCPU) or `"never"` (KVM writes no byte, as on the project's kvm_pvm host; the
            twins use it). Under vcpulab's token schedulers the byte is also set while a runnable
            vCPU holds no token, whatever this says (the real scheduler writes it, src/kvm/sched/).
            Default `"instruction_boundary"`.
        yield_single_task_bailout: `kvm_sched_yield` (the KICK_CPU yield and PV sched yield)
            gives up at once while the yielder is alone on its host CPU (`single_task_running()`;
            "KVM: X86: Bail out of direct yield in case of under-committed scenarios", Wanpeng Li,
            2021, v5.13). False: hosts before it, which always try `kvm_vcpu_yield_to` (it can still
            boost a target waiting on another CPU's queue). Default True.
    """

    # BEGIN GENERATED FIELDS (Pv): python -m vcpulab._codegen
    steal_time: bool = True
    sched_yield: bool = True
    apicv: bool = True
    placement: str = "available_idle"
    hypercall_ns: int = 1500
    halt_exit_ns: int = 1500
    halt_wake_ns: int = field(default=0, metadata=_NEW)
    halt_wake_jitter: float = field(default=0.0, metadata=_NEW)
    guest_idle_poll_ns: int = 0
    guest_idle_poll_vcpus: tuple[int, ...] = field(default=(), metadata=_NEW)
    guest_idle_poll_limit: str = field(default="clock", metadata=_NEW)
    pv_spinlocks: bool = True
    kick_yield: bool = True
    tlb_flush: bool = False
    send_ipi: bool = False
    icr_write_ns: int = 0
    preempted_byte: str = field(default="instruction_boundary", metadata=_NEW)
    yield_single_task_bailout: bool = field(default=True, metadata=_NEW)
    # END GENERATED FIELDS


# -------------------------------------------------------------------------- VM


@dataclass(frozen=True)
class Guest(_Base):
    """The guest kernel's own choices (its version), as opposed to the
    host's (``Pv``, ``HaltPoll``, ``Ple``).

    Attributes:
        lock_model: `"simple"` (default; the simulator's first rules: FIFO hand-off for every
            queued kind, the PV predecessor check only when a waiter (re)starts spinning, mutex
            spinners watch the owner only) or `"kernel"`: `pv_queued` is the PV qspinlock of
            kernel/locking/qspinlock_paravirt.h — stealing at slow-path entry as `pv_lock_steal`
            says (refused while the queue head spins with the pending bit set), queue nodes spin
            SPIN_THRESHOLD iterations or stop early when the previous node is not running
            (`pv_wait_node`, `pv_wait_early`, re-checked when that node halts), the head spins
            SPIN_THRESHOLD iterations afresh (`pv_wait_head_or_lock`) then halts, the unlock frees
            the lock and kicks a halted head (`__pv_queued_spin_unlock_slowpath`); mutex spinners
            queue in an OSQ and give up when the spinner before them is on a preempted vCPU
            (`osq_lock`).
        pv_wait_early: Kernel lock model: `"prev_halted"` (default; the rule from v4.5,
            cd0272fab785, and again since 89340d0935c9, Oct 2019), `"never"` (v4.2-v4.4: no
            wait-early) or `"prev_halted_or_preempted"` (75437bb304b2 "locking/pvqspinlock: Don't
            wait if vCPU is preempted", 2019, reverted by 89340d0935c9 in 5.4 and the stable kernels
            after a 7-8x ebizzy regression: a node also halts when the previous node's vCPU is
            preempted).
        pv_lock_steal: Kernel lock model: how a waiter entering the `pv_queued` slow path may
            take the lock ahead of the queue: `"hybrid"` (default; the unfair loop of 11752adb68a3,
            v4.15, 2017, to today), `"once"` (one attempt, v4.5-v4.14) or `"none"` (v4.2-v4.4).
            Every mode takes a lock that is free with no queue.
        vcpu_is_preempted: The guest asks `vcpu_is_preempted()` in `owner_on_cpu` (mutex
            spinning) and `osq_lock` (4.10+, 2016); False: `owner->on_cpu` only (3.x and 4.x before
            4.10). Needs `Pv.steal_time`. Default True.
        load_balance: The guest scheduler balances its threads between its vCPUs
            (kernel/sched/fair.c, 5.x): `newidle_balance` when a vCPU runs out of threads pulls one
            waiting thread from the vCPU with the most waiting threads, unless the vCPU's `avg_idle`
            (1/8-weight average of its idle periods, capped at 2 × `migration_cost_ns`) is below
            `migration_cost_ns`; and a guest tick of a vCPU with two or more runnable threads kicks
            the nohz idle balance, at most once per balance interval (`sd_weight` ms for the VM's
            one domain, `sd_init` in kernel/sched/topology.c), which pulls one thread to each idle
            vCPU and wakes it. Threads that stopped running less than `migration_cost_ns` ago stay
            (`task_hot`). Simplifications: one domain spanning the VM, queue lengths instead of PELT
            loads, one thread per pull, no balancing between busy vCPUs, the kick's IPI and the
            balancing itself cost nothing. Default False (threads move only at wake-up, as before
            the option).
        migration_cost_ns: `sysctl_sched_migration_cost` of the guest, ns. Default 500000
            (kernel/sched/fair.c).
        tick_ns: The guest's scheduler tick, ns (used by `load_balance`). Default 4000000
            (CONFIG_HZ=250, the default of kernel/Kconfig.hz).
        wake_placement: How the guest kernel chooses the vCPU a woken thread runs on.
            `"first_idle"` (default; vcpulab's first rule): the first available vCPU in VM order
            from the thread's previous vCPU, else the previous vCPU. `"select_task_rq_fair"`: the
            guest's kernel/sched/fair.c — with the waker on another vCPU and not `wake_wide`,
            `wake_affine` (`wake_affine_idle`, then `wake_affine_weight`) chooses the target between
            the waker's and the previous vCPU; `select_idle_sibling` then takes the target if
            available, the previous vCPU if available and in the target's LLC, the thread's
            `recent_used_cpu` likewise, with SMT an idle sibling of the previous vCPU
            (`select_idle_smt`) or a whole idle core (`select_idle_core`), else the first available
            vCPU of `select_idle_cpu`'s scan from target + 1 within `idle_scan`'s limit, else the
            target. "Available" is `Pv.placement`'s rule (`available_idle_cpu` = idle and not
            preempted upstream; the 2021 RFC's `is_idle` byte). Simplified: loads are runnable
            thread counts, not PELT averages; wake-ups are never sync.
        llc_vcpus: VCPUs per last-level cache in the topology the guest sees (its `sd_llc`),
            counted from the VM's vCPU 0; 0 (default): one LLC spans the VM, as QEMU's `-smp N`
            gives from QEMU 6.2 on (cores preferred over sockets). A multiple of `threads_per_core`
            that divides `Vm.vcpus`. Used by `"select_task_rq_fair"` only.
        threads_per_core: vCPUs per core in the topology the guest sees (SMT siblings, the
            guest's `cpu_smt_mask`). 1 (default): QEMU's default `threads=1`. Used by
            `select_task_rq_fair` placement only (`select_idle_core`).
        wake_wide: The guest's `wake_wide` (v3.12 on): a waker that wakes many different threads
            (flips at least the LLC size, and at least LLC size times the wakee's) sends each wakee
            to its previous vCPU's neighbourhood instead of `wake_affine`'s choice. Default True.
            Used by `"select_task_rq_fair"` only.
        recent_used_cpu: `select_idle_sibling` tries the vCPU the thread was woken from last
            time after the target and the previous vCPU (32e839dda3ba, v4.16). Default True. Used by
            `"select_task_rq_fair"` only.
        idle_scan: `select_idle_cpu`'s limit: `"sis_util"` (default; SIS_UTIL, 70fb5ccf2ebb,
            v6.0: `nr_idle_scan` = nr_llc × (1024 − x² × 117² / (10000 × 1024)) / 1024 with x the
            LLC's utilisation per vCPU in 1/1024 and 117 the LLC domain's `imbalance_pct`, so the
            scan stops near 85 % busy; simplified: the utilisation is the share of the LLC's vCPUs
            with a thread running or waiting at the wake-up, not PELT's `util_avg`) or `"full"` (the
            whole LLC: 3.x, and the stand-in for SIS_PROP of v4.13-v6.5, whose limit depends on
            `avg_idle` and `avg_scan_cost`, timings the model does not keep). Used by
            `"select_task_rq_fair"` only.
        vcpu_start_ns: Guest kernel work each vCPU runs when it first enters the guest, before
            its scheduler picks a thread, ns: a program's start (enabling its LAPIC, its first
            instructions and their first-touch faults). It runs with interrupts off (an IPI waits
            for its end) and holds the vCPU's CPU as any guest work does; preempted, it goes on
            where it stopped. Default 0 (every vCPU picks a thread at its first entry). The twins of
            real runs under vcpulab's scheduler set it to the start measured on the real vCPUs
            (`vcpulab.twins.vcpu_start_of`).
        vcpu0_waits_for_starts: The VM's first vCPU, after its start, spins until every other
            vCPU of the VM has run its start and has nothing to run, and only then picks a thread:
            the start of vcpulab's guest programs whose vCPU 0 hands out work (`WakePlacement`'s
            waker waits for every worker's idle flag, so its first choice is the placement rule's,
            not the start's order). Default False.
    """

    # BEGIN GENERATED FIELDS (Guest): python -m vcpulab._codegen
    lock_model: str = "simple"
    pv_wait_early: str = "prev_halted"
    pv_lock_steal: str = field(default="hybrid", metadata=_NEW)
    vcpu_is_preempted: bool = True
    load_balance: bool = field(default=False, metadata=_NEW)
    migration_cost_ns: int = field(default=500_000, metadata=_NEW)
    tick_ns: int = field(default=4_000_000, metadata=_NEW)
    wake_placement: str = field(default="first_idle", metadata=_NEW)
    llc_vcpus: int = field(default=0, metadata=_NEW)
    threads_per_core: int = field(default=1, metadata=_NEW)
    wake_wide: bool = field(default=True, metadata=_NEW)
    recent_used_cpu: bool = field(default=True, metadata=_NEW)
    idle_scan: str = field(default="sis_util", metadata=_NEW)
    vcpu_start_ns: int = field(default=0, metadata=_NEW)
    vcpu0_waits_for_starts: bool = field(default=False, metadata=_NEW)
    # END GENERATED FIELDS


@dataclass(frozen=True)
class Vm(_Base):
    """A VM (or ``count`` identical VMs).

    Attributes:
        vcpus: VCPUs per VM. Default 4.
        count: Number of identical VMs. Default 1.
        threads: Guest threads; 0 = one per vCPU (default). The 2012 benchmarks of [S1] ran 2
            threads per vCPU.
        weight: Scheduler weight of each vCPU thread, in [2, 88761] (1024 = nice 0, the kernel's
            default for a vCPU thread). Default 1024.
        workload: What the threads run; a preset's name (`vcpulab.sim.presets.NAMES`, e.g.
            `"ebizzy_like"`) is that preset with its defaults. Default ``Workload()``.
        ple: Pause-loop exiting, see [`Ple`][vcpulab.sim.Ple]. Default ``Ple()``.
        policy: The directed-yield policy, see [`Policy`][vcpulab.sim.Policy]; a name of
            `vcpulab.sim.policies.NAMES` (e.g. `"dy_eligible"`) is that policy with its defaults
            (`policies.by_name`). Default ``Policy()``.
        pv: Paravirtual features and exit costs, see [`Pv`][vcpulab.sim.Pv]. Default ``Pv()``.
        halt_poll: Host halt polling, see [`HaltPoll`][vcpulab.sim.HaltPoll]. Default
            ``HaltPoll()``.
        guest: The guest kernel's own choices, see [`Guest`][vcpulab.sim.Guest]. Default
            ``Guest()``.
    """

    # BEGIN GENERATED FIELDS (Vm): python -m vcpulab._codegen
    vcpus: int = 4
    count: int = 1
    threads: int = 0
    weight: int = 1024
    workload: Workload = field(default_factory=Workload)
    ple: Ple = field(default_factory=Ple)
    policy: Policy = field(default_factory=Policy)
    pv: Pv = field(default_factory=Pv)
    halt_poll: HaltPoll = field(default_factory=HaltPoll)
    guest: Guest = field(default_factory=Guest)
    # END GENERATED FIELDS

    if TYPE_CHECKING:  # a name is accepted where a policy or a workload is (converted in __post_init__)

        def __init__(
            self,
            vcpus: int = 4,
            count: int = 1,
            threads: int = 0,
            weight: int = 1024,
            workload: Workload | str = Workload(),
            ple: Ple = Ple(),
            policy: Policy | str = Policy(),
            pv: Pv = Pv(),
            halt_poll: HaltPoll = HaltPoll(),
            guest: Guest = Guest(),
        ) -> None: ...

    def __post_init__(self) -> None:
        # names, as in TOML specs and sweep grids
        if isinstance(self.policy, str):
            object.__setattr__(self, "policy", _policy_by_name(self.policy))
        if isinstance(self.workload, str):
            object.__setattr__(self, "workload", _workload_by_name(self.workload))
        self._check_fields()
        _int(self, "threads", hi=16 * self.vcpus)
        nthreads = self.threads or self.vcpus
        for i, p in enumerate(self.workload.phases):
            if isinstance(p, Ipi) and p.targets >= self.vcpus and p.targets != 0:
                raise ValueError(f"Vm.workload.phases[{i}].targets must be < vcpus ({self.vcpus}), got {p.targets}")
            if isinstance(p, Send) and p.to >= max(nthreads, 2):
                raise ValueError(f"Vm.workload.phases[{i}].to must be < threads ({nthreads}), got {p.to}")
        smt, llc = self.guest.threads_per_core, self.guest.llc_vcpus
        if self.vcpus % smt:
            raise ValueError(f"Vm.vcpus must be a multiple of guest.threads_per_core ({smt}), got {self.vcpus}")
        if llc and (llc % smt or self.vcpus % llc):
            raise ValueError(
                f"Vm.guest.llc_vcpus must be 0 (the whole VM) or a multiple of guest.threads_per_core ({smt}) "
                f"that divides vcpus ({self.vcpus}), got {llc}"
            )

    @classmethod
    def _field_from_plain(cls, name: str, v: Any) -> Any:
        typ: Any = {
            "workload": Workload,
            "ple": Ple,
            "policy": Policy,
            "pv": Pv,
            "halt_poll": HaltPoll,
            "guest": Guest,
        }.get(name)
        return typ.from_dict(v) if typ else v


# ---------------------------------------------------------------------- Config


@dataclass(frozen=True)
class Config(_Base):
    """A whole experiment.

    Attributes:
        host: The host. Default ``Host()``.
        vms: A tuple of [`Vm`][vcpulab.sim.Vm] entries. Default ``(Vm(),)``.
        duration_ns: Simulated time limit, ns. The run also ends earlier when every VM with a
            finite `iterations` has completed them. Default ``100_000_000``.
        seed: Seed of the run's RNG (PCG64); same seed and config → identical results. Default
            ``0``.
        trace: Record the per-host-CPU trace (`Result.trace`). Default False.
        warmup_ns: Iterations completing before this instant are not counted in ops, throughput
            and latency (time categories cover the whole run), ns. Default 0.
        trace_from_ns: With `trace`, record only the slices that end after this instant, ns
            (whole slices, not clipped): a sched map of a window of a long run then needs only that
            window's rows. Default 0 (from the start).
        trace_until_ns: With `trace`, record only the slices that start before this instant, ns;
            0 = until the run's end. Default 0.
    """

    # BEGIN GENERATED FIELDS (Config): python -m vcpulab._codegen
    host: Host = field(default_factory=Host)
    vms: tuple[Vm, ...] = (Vm(),)
    duration_ns: int = 100_000_000
    seed: int = 0
    trace: bool = False
    warmup_ns: int = 0
    trace_from_ns: int = field(default=0, metadata=_NEW)
    trace_until_ns: int = field(default=0, metadata=_NEW)
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        if isinstance(self.vms, list):
            object.__setattr__(self, "vms", tuple(self.vms))
        if isinstance(self.vms, Vm):
            object.__setattr__(self, "vms", (self.vms,))
        self._check_fields()
        if not isinstance(self.vms, tuple) or not self.vms or not all(isinstance(v, Vm) for v in self.vms):
            raise ValueError(f"Config.vms must be a non-empty tuple of Vm, got {self.vms!r}")
        total = sum(v.vcpus * v.count for v in self.vms)
        if total > 65536:
            raise ValueError(f"Config.vms must hold <= 65536 vCPUs in total, got {total}")
        _int(self, "warmup_ns", hi=self.duration_ns - 1)
        _int(self, "trace_from_ns", hi=self.duration_ns - 1)
        if self.trace_until_ns and self.trace_until_ns <= self.trace_from_ns:
            raise ValueError(
                f"Config.trace_until_ns must be 0 (the run's end) or > trace_from_ns ({self.trace_from_ns}), "
                f"got {self.trace_until_ns}"
            )
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
            return tuple(Vm.from_dict(x) for x in _plain_seq("Config", name, v))
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
        """A copy with a nested field replaced, e.g. ``"vms.0.policy"`` or ``"host.n_pcpus"``.

        Tuple indices are 0, 1, … (a negative index is refused: ValueError)."""
        if not isinstance(path, str):
            raise TypeError(f"with_path: path must be a dotted str, got {type(path).__name__}")
        return _set_path(self, path.split("."), value, path)


def _set_path(obj: Any, parts: list[str], value: Any, full: str) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(obj, tuple):
        try:
            if not head.isdigit():  # no negative (or other Python) indices: each point names one entry
                raise ValueError(head)
            i = int(head)
            item = obj[i]
        except (ValueError, IndexError):
            raise ValueError(f"path {full!r}: {head!r} is not an index of a tuple of {len(obj)}") from None
        return obj[:i] + (_set_path(item, rest, value, full),) + obj[i + 1 :]
    if dataclasses.is_dataclass(obj):
        head = new_field_name(type(obj), head, f"path {full!r}")
    if not dataclasses.is_dataclass(obj) or head not in {f.name for f in dataclasses.fields(obj)}:
        raise ValueError(f"path {full!r}: {type(obj).__name__} has no field {head!r}")
    inst: Any = obj  # a dataclass instance (is_dataclass above also admits a class)
    return dataclasses.replace(inst, **{head: _set_path(getattr(obj, head), rest, value, full)})


for _cls in (*(globals()[n] for n in RUST_DEFS), *_PHASES.values()):
    accept_renamed_fields(_cls)
