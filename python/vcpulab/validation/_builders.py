"""The builders: functions that turn (context, variant, seed) into the simulator configuration of a
published experiment through a [`Ctx`][vcpulab.validation.Ctx], the workloads they run, the Python
candidate gate [`OnSpinGate`][vcpulab.validation.OnSpinGate] and
[`background`][vcpulab.validation.cases.background], a helper for user cases."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from vcpulab.sim import halt_poll as hp
from vcpulab.sim import policies as P
from vcpulab.sim import presets
from vcpulab.sim._config import Background, Compute, Config, Policy, Workload
from vcpulab.validation._case import Builder, Ctx


class OnSpinGate:
    """``kvm_vcpu_on_spin`` as a Python policy with a choice of candidate gate
    ([K1]): ``"ready"`` (v5.3 on: running vCPUs are skipped, woken
    ones count) or ``"preempted"`` (2013 to v5.2: only involuntarily
    preempted vCPUs). Then, in order: a blocking candidate must be
    dy_runnable; a candidate preempted in guest user mode is skipped when the
    spinner is in kernel mode (unless an interrupt is pending for it and
    ``user_mode_irq_boost``, v5.13 on: 52acd22faa1a); the dy_eligible toggle (a shadow table, as
    [`vcpulab.sim.policies.DyEligibleInPython`][]); the -ESRCH budget.

    Stands in for a built-in gate option of the guest model; both variants of
    a comparison use this class, so neither gains from Python/Rust differences.
    """

    def __init__(self, gate: str = "ready", esrch_budget: int = 3, user_mode_irq_boost: bool = True) -> None:
        if gate not in ("ready", "preempted"):
            raise ValueError(f"OnSpinGate.gate must be 'ready' or 'preempted', got {gate!r}")
        if not isinstance(user_mode_irq_boost, bool):
            raise ValueError(f"OnSpinGate.user_mode_irq_boost must be a bool, got {user_mode_irq_boost!r}")
        self.gate = gate
        self.user_mode_irq_boost = user_mode_irq_boost
        self.esrch_budget = esrch_budget
        self.dy: dict[int, bool] = {}
        self.__name__ = f"on_spin_gate_{gate}"

    def __call__(self, spinner: Any, candidates: list[Any]) -> int | None:
        start = 0
        if not spinner.attempts:
            self.dy[spinner.index] = False
        else:
            if self.esrch_budget and sum(1 for _, r in spinner.attempts if r < 0) >= self.esrch_budget:
                return None
            last = spinner.attempts[-1][0]
            start = next(i for i, c in enumerate(candidates) if c.index == last) + 1
        for c in candidates[start:]:
            if not (c.ready if self.gate == "ready" else c.preempted):
                continue
            if c.blocking and not c.dy_runnable:
                continue
            exempt = self.user_mode_irq_boost and c.pending_interrupt
            if c.preempted and spinner.in_kernel and not exempt and not c.preempted_in_kernel:
                continue
            if c.in_spin_loop:
                eligible = self.dy.get(c.index, False)
                self.dy[c.index] = not eligible
                if not eligible:
                    continue
            return c.index
        return None


def _gate(ctx: Ctx, gate: str) -> Policy:
    """The era's upstream policy with the built-in candidate gate
    (``Policy.candidate_gate``); every other choice stays the era's."""
    return dataclasses.replace(ctx.policy, candidate_gate=gate)


# ---- case builders


def _ebizzy() -> Workload:
    """ebizzy as the guest runs it: its record allocations map and unmap
    memory under the mm's ``mmap_sem``, where threads sleep (the guest model;
    ``presets.ebizzy_like(mmap_sem=True)``)."""
    return presets.ebizzy_like(mmap_sem=True)


def _ebizzy2019(ctx: Ctx) -> Workload:
    """ebizzy ``-M`` as the 2019 boost sources ran it: one record per
    iteration, a TLB-shootdown IPI per record and the record's LRU-lock
    traffic (``presets.ebizzy_no_mmap_like``, whose docstring derives each
    number but the hold, the era's ``programs.ebizzy_lru_hold_ns``)."""
    return presets.ebizzy_no_mmap_like(lru_hold_ns=int(ctx.program("ebizzy_lru_hold_ns")))


#: ebizzy's default thread count per CPU: "-t <num> Number of threads (2 * number cpus by default)"
#: (ebizzy 0.3's usage text); the 2019 sources ran "ebizzy -M" without -t
_EBIZZY_THREADS = 2


def _ple2012(preset: Callable[[], Workload], overcommit: int) -> Builder:
    """Raghavendra's 2012 set-up: a 32-CPU host, ``overcommit`` guests of 32
    vCPUs with 2 benchmark threads per vCPU; base = the 2011 handler, new =
    dy_eligible."""

    def build(ctx: Ctx, variant: str, seed: int) -> Config:
        pol = P.baseline_2011() if variant == "base" else P.dy_eligible()
        vm = ctx.vm(workload=preset(), vcpus=32, count=overcommit, threads=64, policy=pol)
        return ctx.config(ctx.host(n_pcpus=32, affinity="all"), [vm], seed)

    return build


def _sched_map(vms: int, vcpus: int) -> Builder:
    """Theurer's 80-CPU host at 2x overcommit, pinned vCPUs; base = the
    era's fair class (CFS in 2012) with PLE and the era's directed yield,
    new = gang."""

    def build(ctx: Ctx, variant: str, seed: int) -> Config:
        vm = ctx.vm(workload=presets.spinlock_microbench(), vcpus=vcpus, count=vms)
        sched = {} if variant == "base" else {"scheduler": "gang"}
        return ctx.config(ctx.host(n_pcpus=80, **sched), [vm], seed)

    return build


def _sched_map_16x10_vs_8x20(ctx: Ctx, variant: str, seed: int) -> Config:
    vms, vcpus = (8, 20) if variant == "base" else (16, 10)
    vm = ctx.vm(workload=presets.spinlock_microbench(), vcpus=vcpus, count=vms)
    return ctx.config(ctx.host(n_pcpus=80), [vm], seed)


def _yield_share_2012(ctx: Ctx, variant: str, seed: int) -> Config:
    vm = ctx.vm(workload=_ebizzy(), vcpus=32, threads=64, policy=P.baseline_2011())
    return ctx.config(ctx.host(n_pcpus=32, affinity="all"), [vm], seed)


#: one thread's work in a measured run of the 2021 PARSEC rows (ns): 40 steps
#: of the 0.5 ms the step was assumed to be until 0.3.24, so that a shorter
#: step takes more steps, not less work (its length is the run's, which the
#: sensitivity's ``run.length`` scales)
PARSEC_WORK_NS = 20_000_000


def _pcpu_is_idle(kernel: str) -> Builder:
    """The 2021 RFC's set-up (one 16-vCPU VM, 16 threads, an idle 112-CPU
    host); ``kernel`` is the PARSEC program's synchronisation as the suite's
    characterisation describes it (``_PARSEC_SYNC``): ``"barrier"`` (data-
    parallel steps between barriers), ``"lock_heavy"`` (fine-grained locks
    and a barrier per step) or ``"task_queue"`` (frames of tasks taken from
    a task queue by whichever thread is free). The barrier kernel's step
    is the era's ``programs.parsec_step_ns``; a task-queue frame is one such
    step of work of 16 threads, in 128 tasks; either runs
    ``PARSEC_WORK_NS`` of work per thread."""

    def build(ctx: Ctx, variant: str, seed: int) -> Config:
        step_ns = int(ctx.program("parsec_step_ns"))
        steps = ctx.count(max(1, round(PARSEC_WORK_NS / step_ns)))
        if kernel == "lock_heavy":
            wl = presets.parsec_lock_heavy_like(iterations=ctx.count(100))
        elif kernel == "task_queue":
            # a frame holds the barrier kernel's step of work (16 threads x one step) in 128 tasks
            wl = presets.parsec_task_queue_like(task_ns=max(1, step_ns * 16 // 128), tasks=128, frames=steps)
        else:
            wl = presets.parsec_barrier_like(compute_ns=step_ns, iterations=steps)
        placement = "available_idle" if variant == "base" else "pcpu_is_idle_rfc"
        vm = ctx.vm(workload=wl, vcpus=16, threads=16, pv={"placement": placement})
        host = ctx.host(n_pcpus=112, sockets=2, threads_per_core=2, affinity="all")
        return Config(host=host, vms=(vm,), seed=seed, duration_ns=10_000_000_000)

    return build


def _skylake80_ebizzy(ctx: Ctx, vms: int, seed: int, **vm_setup: Any) -> Config:
    """The 2019 sources' set-up: ``vms`` VMs of 80 vCPUs running ebizzy -M
    (2 threads per vCPU) on the 80-thread 2-socket Skylake host, vCPUs
    unpinned; ``vm_setup`` is the compared knob (``Ctx.vm``'s keywords)."""
    vm = ctx.vm(workload=_ebizzy2019(ctx), vcpus=80, count=vms, threads=_EBIZZY_THREADS * 80, **vm_setup)
    return ctx.config(ctx.host(n_pcpus=80, sockets=2, threads_per_core=2, affinity="all"), [vm], seed)


def _boost_ready(vms: int) -> Builder:
    """Wanpeng Li's 2019 set-up: an 80-thread host, ``vms`` VMs of 80 vCPUs
    running ebizzy; base = the 'preempted' gate, new = the 'ready' gate."""

    def build(ctx: Ctx, variant: str, seed: int) -> Config:
        return _skylake80_ebizzy(ctx, vms, seed, policy=_gate(ctx, "preempted" if variant == "base" else "ready"))

    return build


def _boost_queue_head(vms: int) -> Builder:
    """Wanpeng Li's 2019 set-up for 266e85a5ec91: an 80-thread host, ``vms``
    VMs of 80 vCPUs running ebizzy; base = KICK_CPU only wakes, new = it
    also directed-yields to the kicked queue head."""

    def build(ctx: Ctx, variant: str, seed: int) -> Config:
        return _skylake80_ebizzy(ctx, vms, seed, pv={"kick_yield": variant != "base"})

    return build


def _wait_early_revert(ctx: Ctx, variant: str, seed: int) -> Config:
    """The revert 89340d0935c9's set-up (three 80-vCPU VMs running ebizzy on
    the 80-thread host, as the boost cases): base = the guest with
    75437bb304b2 (``pv_wait_early`` also on a preempted predecessor, the
    2019 era's guest), new = the reverted guest; the host's candidate gate
    and kick are the case's (its overrides)."""
    wait_early = "prev_halted_or_preempted" if variant == "base" else "prev_halted"
    return _skylake80_ebizzy(ctx, 3, seed, guest={"pv_wait_early": wait_early})


def _kvm_opts_reverted_guest(ctx: Ctx, variant: str, seed: int) -> Config:
    """The same set-up with the reverted guest (the case's override); base =
    the host without the two 2019 boosts (the 'preempted' gate, a kick that
    only wakes), new = with both (the 'ready' gate of d73eb57b80b9, the
    queue-head yield of 266e85a5ec91)."""
    base = variant == "base"
    return _skylake80_ebizzy(
        ctx, 3, seed, policy=_gate(ctx, "preempted" if base else "ready"), pv={"kick_yield": not base}
    )


_STRESS = Workload(phases=(Compute(1_000_000),), name="stress_cpu")


def _boost_desktop(ctx: Ctx, variant: str, seed: int) -> Config:
    pol = _gate(ctx, "preempted" if variant == "base" else "ready")
    ebizzy = ctx.vm(workload=_ebizzy2019(ctx), vcpus=8, threads=_EBIZZY_THREADS * 8, policy=pol)
    stress = ctx.vm(workload=_STRESS, vcpus=8, threads=2, policy=pol)
    return ctx.config(ctx.host(n_pcpus=8, affinity="all"), [ebizzy, stress], seed)


def _hp_idle(policy_new: str, hz: int, vcpus: int = 1) -> Builder:
    def build(ctx: Ctx, variant: str, seed: int) -> hp.Scenario:
        p = ctx.hp_params(policy="off" if variant == "base" else policy_new)
        return ctx.hp_scenario(p, [hp.Timer(hz)] * vcpus, seed)

    return build


def _hp_tcp_rr(policy_new: str) -> Builder:
    def build(ctx: Ctx, variant: str, seed: int) -> hp.Scenario:
        p = ctx.hp_params(policy="off" if variant == "base" else policy_new)
        return ctx.hp_scenario(p, [hp.Message(gap_ns=20_000, exponential=True)], seed)

    return build


def background(utilization: float) -> Background:  # pragma: no cover - a helper for user cases
    """Host load of the published set-up (not an era value)."""
    return Background(utilization=utilization)
