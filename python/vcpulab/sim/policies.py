"""Directed-yield policies for [`vcpulab.sim.Vm`][].

Built-in policies run in Rust. A **Python policy** is any callable
``fn(spinner, candidates) -> int | None``:

* ``spinner`` ([`vcpulab.sim.Spinner`][]): ``index``, ``n_vcpus``,
  ``last_boosted``, ``in_kernel``, ``attempts`` (``[(index, result), ...]``
  of the yield_to calls already made in this exit), ``waited_for`` (ground
  truth no kernel has; for oracles) and ``state`` (its own [`VcpuView`][vcpulab.sim.VcpuView]);
* ``candidates``: the other vCPUs' [`vcpulab.sim.VcpuView`][] in
  round-robin order starting after ``last_boosted``.

Return the index of a vCPU to ``yield_to``, or None to stop. After a failed
attempt (0 or -ESRCH = -3) the callable is called again with ``attempts``
extended; after a success the exit ends. Examination is charged
``Ple.candidate_ns`` per candidate in round-robin order up to the one
returned (up to the end of the round on None), as a kernel scan would be.
The callable is deep-copied once for each run (each sweep point), so state
kept on it (e.g. a shadow ``dy_eligible`` table) starts fresh and a seed
always gives the same result; the VMs of one run share that copy, so state
that is per VM is keyed by ``spinner.vm``. A callable that cannot be
deep-copied is refused (ValueError). It is called with the GIL held.

A Python policy sees snapshots: it cannot flip the engine's ``dy_eligible``
flags (the kernel's ``kvm_vcpu_eligible_for_directed_yield`` toggle), so for a
VM run by a Python policy ``VcpuView.dy_eligible`` stays at its initial value.
A policy that wants the toggle keeps its own table, as
[`DyEligibleInPython`][vcpulab.sim.policies.DyEligibleInPython] does (and then reproduces the built-in exactly).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vcpulab.sim._policy import Policy, _label

__all__ = [
    "DyEligibleInPython",
    "ESRCH",
    "NAMES",
    "baseline_2011",
    "by_name",
    "dy_eligible",
    "label",
    "no_yield",
    "oracle",
    "python",
    "random",
    "resolve",
    "upstream",
]

#: yield_to() result when both run queues hold a single task.
ESRCH = -3


def upstream(
    *,
    esrch_budget: int = 3,
    last_boosted_bug: bool = False,
    dy_eligible: bool = True,
    kernel_filter: bool = True,
    candidate_gate: str = "ready",
    ipi_aware: bool = False,
    user_mode_irq_boost: bool = True,
) -> Policy:
    """Upstream today ([K1]): one pass from last_boosted+1; skip not-ready;
    blocking ⇒ dy_runnable; kernel-mode filter; dy_eligible toggle; -ESRCH budget 3.
    ``last_boosted_bug=True`` models v6.12-6.18 (offset stored instead of index).
    ``candidate_gate="preempted"`` models kernels before 5.3, whose first test
    was ``vcpu->preempted`` instead of ``vcpu->ready`` (see [`Policy`][vcpulab.sim.Policy]).
    ``ipi_aware=True`` is the 2025 IPI-aware candidate selection RFC (see
    [`Policy`][vcpulab.sim.Policy]). ``user_mode_irq_boost=False`` models
    kernels before 5.13, whose kernel-mode filter skipped a candidate
    preempted in user mode even with a posted interrupt pending."""
    return Policy(
        kind="upstream",
        candidate_gate=candidate_gate,
        ipi_aware=ipi_aware,
        esrch_budget=esrch_budget,
        last_boosted_bug=last_boosted_bug,
        dy_eligible=dy_eligible,
        kernel_filter=kernel_filter,
        user_mode_irq_boost=user_mode_irq_boost,
    )


def baseline_2011() -> Policy:
    """2011-2012 baseline: round robin from last_boosted+1 (the two passes),
    skipping running (in guest) and halted vCPUs; stop at the first success."""
    return Policy(kind="baseline_2011", esrch_budget=0)


def dy_eligible(*, esrch_budget: int = 0) -> Policy:
    """The [S1] patch: baseline + the in_spin_loop/dy_eligible toggle.
    ``esrch_budget=3`` adds the follow-up undercommit patch."""
    return Policy(kind="dy_eligible", esrch_budget=esrch_budget)


def random() -> Policy:
    """One uniformly random candidate passing the upstream filter, one attempt."""
    return Policy(kind="random")


def oracle() -> Policy:
    """Yield straight to the vCPU the spinner waits for if it is not running:
    the lock holder (or, when the holder runs, the first waiter queued ahead
    of the spinner whose vCPU is preempted on another CPU than the holder's:
    a yield to one queued behind the running holder would preempt it), or an
    IPI target that has not run its handler. Knowledge no kernel has: a
    reference for directed yield, not a bound everywhere. It beats every
    built-in policy on the 2012 scenarios the tests check (the 8 × 20 sched
    map, ebizzy-like at 1x and 2x, 16 vCPUs of ebizzy-like on 8 CPUs), but
    on the ``ple2012_ebizzy_2x`` case's set-up (two 32-vCPU ebizzy-like VMs
    with an ``mmap_sem``, 32 CPUs) it runs at about 0.37x the 2011 handler
    (105 k against 290 k records/s, seeds 0-2, half the lengths, measured
    2026-12-05): all of a VM's spinners yield to the one vCPU they wait for,
    where the 2011 handler spreads its yields over preempted vCPUs."""
    return Policy(kind="oracle")


def no_yield() -> Policy:
    """Never yield: PLE exits only cost."""
    return Policy(kind="no_yield")


def python(fn: Callable[..., Any], name: str | None = None) -> Policy:
    """A policy written in Python (see the module docstring for the protocol)."""
    if not callable(fn):
        raise ValueError(f"Policy.fn must be callable, got {fn!r}")
    nm = name or getattr(fn, "__name__", None) or type(fn).__name__
    return Policy(kind="python", name=str(nm), fn=fn)


class DyEligibleInPython:
    """The [S1] policy (``dy_eligible()``) written in Python, as an
    example of the protocol; it gives exactly the built-in's results.

    It keeps its own dy_eligible table: a candidate in a spin loop is
    eligible every other time it is examined; the spinner's entry is reset
    when a new exit starts (the kernel clears it when the spinner leaves
    kvm_vcpu_on_spin, and nobody reads it in between).
    """

    __name__ = "dy_eligible_in_python"

    def __init__(self) -> None:
        #: (vm, vCPU index) -> dy_eligible (one table for the VMs of a run)
        self.dy: dict[tuple[int, int], bool] = {}

    def __call__(self, spinner: Any, candidates: list[Any]) -> int | None:
        start = 0
        vm = spinner.vm
        if not spinner.attempts:
            self.dy[(vm, spinner.index)] = False
        else:
            last = spinner.attempts[-1][0]
            start = next(i for i, c in enumerate(candidates) if c.index == last) + 1
        for c in candidates[start:]:
            if c.blocking and not c.ready:
                continue  # halted (waitqueue active)
            if c.in_spin_loop:
                eligible = self.dy.get((vm, c.index), False)
                self.dy[(vm, c.index)] = not eligible
                if not eligible:
                    continue
            if c.in_guest:
                continue  # PF_VCPU
            return c.index
        return None


#: The built-in policies by name: each name is its constructor's (and the
#: label of what it builds); accepted wherever a policy is (TOML specs, sweep
#: grids, ``by_name``).
NAMES = ("upstream", "baseline_2011", "dy_eligible", "random", "oracle", "no_yield")


def by_name(name: str) -> Policy:
    """The built-in policy ``name`` with its defaults (one of [`NAMES`][vcpulab.sim.policies.NAMES]),
    e.g. ``by_name("dy_eligible") == dy_eligible()``."""
    if name not in NAMES:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(NAMES)}, or pass a Policy")
    return globals()[name]()  # type: ignore[no-any-return]


def label(policy: Policy) -> str:
    """A policy's label for tables and sweep columns: the name of the
    constructor that builds it (``baseline_2011()`` → ``"baseline_2011"``,
    ``no_yield()`` → ``"no_yield"``), ``python:<name>`` for a Python policy."""
    return _label(policy)


def resolve(value: Any) -> Any:
    """``value`` as a policy: a name of [`NAMES`][vcpulab.sim.policies.NAMES] becomes the policy, a
    [`Policy`][vcpulab.sim.Policy] (or anything else, for the config to judge) is returned
    unchanged."""
    return by_name(value) if isinstance(value, str) else value
