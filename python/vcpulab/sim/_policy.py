"""A VM's directed-yield policy as configured: [`Policy`][vcpulab.sim.Policy]
and its label rule.

On ``_base``; below [`vcpulab.sim.policies`][] (the constructors, ``by_name``,
``label``) and ``_config`` (``Vm.policy``), which re-export it. ``_config``
stays its ``__module__`` (pickles and reprs).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vcpulab.sim._base import _NEW, _Base, renamed_choices

#: Policy.kind names before 2026-12-05 -> today's (the constructors' names), read with a
#: DeprecationWarning: the schema's deprecated aliases (Rust's serde aliases)
POLICY_OLD_KINDS = renamed_choices("Policy", "kind")


@dataclass(frozen=True)
class Policy(_Base):
    """A VM's directed-yield policy (what kvm_vcpu_on_spin does), [K1].

    Use the constructors in [`vcpulab.sim.policies`][] rather than this class.

    Attributes:
        kind: `"upstream"` (default; [K1]), `"baseline_2011"`, `"dy_eligible"` ([S1]),
            `"random"`, `"oracle"`, `"no_yield"` or `"python"`: the names of the constructors in
            [`vcpulab.sim.policies`][] that build them.
        esrch_budget: -ESRCH results tolerated before the scan stops; 0 = unlimited. Default 3
            (kernel). `dy_eligible` uses 0 (the 2012 patch).
        last_boosted_bug: Upstream: store the loop offset instead of the index (v6.12-6.18 bug).
            Default False.
        dy_eligible: Upstream: apply the dy_eligible toggle. Default True (x86).
        kernel_filter: Upstream: skip candidates preempted in guest user mode when the spinner
            is in kernel mode. Default True (since ~v4.14).
        name: Python policies: the callable's name (the key it travels under). Default ``""``.
        candidate_gate: Upstream: the first candidate test of `kvm_vcpu_on_spin`: `"ready"`
            (default; `vcpu->ready`, since 5.3, commit d73eb57b80b9 "KVM: Boost vCPUs that are
            delivering interrupts": preempted, or woken from a halt and not yet running) or
            `"preempted"` (`vcpu->preempted`, kernels before 5.3: a woken vCPU that has not run yet
            is not a candidate).
        ipi_aware: Upstream: IPI-aware candidate selection, after Wanpeng Li's RFC ("[PATCH v2
            8/9] KVM: Implement IPI-aware directed yield candidate selection", 18 Dec 2025, not
            merged, https://lkml.iu.edu/hypermail/linux/kernel/2512.2/09450.html): a candidate that
            has not yet handled an IPI the spinner's thread sent passes the in-kernel filter
            (`kvm_vcpu_is_ipi_receiver`; "recent" = still pending: the RFC's recency window, patches
            1-7, is not modelled), then pending interrupts and the preempted fallback as upstream; a
            scan that boosts nobody is followed by a relaxed round that asks `vcpu->preempted` only.
            Default False.
        user_mode_irq_boost: Upstream: a candidate preempted in guest user mode passes the
            kernel-mode filter when it has a posted interrupt pending
            (`kvm_arch_dy_has_pending_interrupt`; 52acd22faa1a "KVM: Boost vCPU candidate in user
            mode which is delivering interrupt", v5.13). False: kernels before 5.13, whose filter
            skips such a candidate whatever it has pending. Default True.
    """

    # BEGIN GENERATED FIELDS (Policy): python -m vcpulab._codegen
    kind: str = "upstream"
    esrch_budget: int = 3
    last_boosted_bug: bool = False
    dy_eligible: bool = True
    kernel_filter: bool = True
    name: str = ""
    candidate_gate: str = "ready"
    ipi_aware: bool = field(default=False, metadata=_NEW)
    user_mode_irq_boost: bool = field(default=True, metadata=_NEW)
    # END GENERATED FIELDS
    fn: Callable[..., Any] | None = field(default=None, compare=False, hash=False, metadata={"serialise": False})

    def __post_init__(self) -> None:
        if isinstance(self.kind, str) and self.kind in POLICY_OLD_KINDS:
            new = POLICY_OLD_KINDS[self.kind]
            warnings.warn(
                f"Policy(kind={self.kind!r}) is deprecated since 2026-12-05; use kind={new!r} (a policy's kind "
                "is now its constructor's name, as its label)",
                DeprecationWarning,
                stacklevel=3,
            )
            object.__setattr__(self, "kind", new)
        self._check_fields()
        if self.kind == "python":
            if self.fn is not None and not callable(self.fn):
                raise ValueError(f"Policy.fn must be callable, got {self.fn!r}")
            if not self.name:
                raise ValueError("Policy.name must name the Python policy")

    @property
    def label(self) -> str:
        """A short name for tables: the name of the constructor in
        [`vcpulab.sim.policies`][] that builds it (``"baseline_2011"``,
        ``"no_yield"``), or ``python:<name>`` ([`vcpulab.sim.policies.label`][])."""
        return _label(self)


def _label(policy: Policy) -> str:
    """[`vcpulab.sim.policies.label`][]: the name of the constructor that builds ``policy``,
    ``python:<name>`` for a Python policy."""
    if policy.kind == "python":
        return f"python:{policy.name}"
    return policy.kind
