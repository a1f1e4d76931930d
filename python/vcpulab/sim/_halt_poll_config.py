"""Host halt polling's configuration: [`HaltPoll`][vcpulab.sim.HaltPoll], its
policy names, and the kvm module parameters behind its fields as this host
sets them (``host_params``, which ``HaltPoll.from_host`` reads).

On ``_base``; below both ``_config`` (``Vm.halt_poll``) and the calibration
model [`vcpulab.sim.halt_poll`][], which re-export these names.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vcpulab._procfs import module_param
from vcpulab.sim._base import _NEW, _Base, choices, renamed_choices

#: Halt-polling policy names, one vocabulary for the engine ([`HaltPoll`][vcpulab.sim.HaltPoll])
#: and the calibration model ([`vcpulab.sim.halt_poll.Params`][]), as the schema lists them
#: (Rust's ``HaltPollPolicy``): ``("off", "fixed", "dynamic-v3", "dynamic-v4", "block-time")``.
HALT_POLL_POLICIES = choices("HaltPoll", "policy")
#: Names used before the vocabulary was unified (``"dynamic"``, ``"dynamic_v4"``, ``"v4"``), each
#: with its new name, as the schema lists Rust's serde aliases: accepted with a DeprecationWarning.
HALT_POLL_OLD_NAMES = renamed_choices("HaltPoll", "policy")


def halt_poll_policy(owner: str, name: Any) -> str:
    """The canonical halt-polling policy name for ``name``: one of
    `HALT_POLL_POLICIES`; an old engine name (``"dynamic"``,
    ``"dynamic_v4"``) gives its new name with a DeprecationWarning; anything
    else raises ValueError naming ``owner`` and the valid names."""
    if isinstance(name, str) and name in HALT_POLL_OLD_NAMES:
        new = HALT_POLL_OLD_NAMES[name]
        warnings.warn(f"{owner}.policy {name!r} is deprecated; use {new!r}", DeprecationWarning, stacklevel=4)
        return new
    if not isinstance(name, str) or name not in HALT_POLL_POLICIES:
        valid = ", ".join(map(repr, HALT_POLL_POLICIES))
        raise ValueError(f"{owner}.policy must be one of {valid}, got {name!r}")
    return name


@dataclass(frozen=True)
class HaltPoll(_Base):
    """Host halt polling ([K3]): before a halting vCPU blocks, its thread
    polls for a wake-up while no other task wants the host CPU.

    The one halt-polling configuration type: the engine's ``Vm.halt_poll``
    and the calibration model's ([`vcpulab.sim.halt_poll.Scenario`][]),
    as in Rust (``HaltPollConfig``). The former ``halt_poll.Params`` is a
    deprecated alias that builds one of these.

    Results carry the kernel's stat names per vCPU: ``halt_attempted_poll``,
    ``halt_successful_poll``, ``halt_poll_invalid``, ``halt_poll_success_ns``,
    ``halt_poll_fail_ns``, ``halt_wait_ns``, ``halt_wakeup``; the time spent
    polling is the ``polling_ns`` category.

    Attributes:
        policy: `"off"` (block at once; default), `"fixed"` (always poll up to `max_ns`, the Feb
            2015 halt_poll_ns), `"block-time"` (upstream since 4.3: the per-vCPU window grows when a
            halt was short and shrinks when it was longer than `max_ns`, §3.2), `"dynamic-v3"` or
            `"dynamic-v4"` (the 2015 v3 and v4 proposals, never merged; vcpulab's reconstructions
            from the review, see [`vcpulab.sim.halt_poll`][]). The same names as
            `halt_poll.Params.policy`; the old `"dynamic"` and `"dynamic_v4"` are read as
            `"block-time"` and `"dynamic-v4"` with a DeprecationWarning. The window and the stats
            come from the same per-vCPU state machine (and the same Rust configuration type) as
            [`vcpulab.sim.halt_poll`][].
        max_ns: halt_poll_ns (or the KVM_CAP_HALT_POLL value), ns. Default 200000 (kernel x86
            `KVM_HALT_POLL_NS_DEFAULT`).
        grow: halt_poll_ns_grow, multiplier (0: never grow; a kernel uint). Default 2 (kernel).
        grow_start_ns: halt_poll_ns_grow_start, ns: the first non-zero window; a window shrunk
            below it becomes 0. Default 10000 (kernel).
        shrink: halt_poll_ns_shrink, divisor; 0 resets to 0 (a kernel uint). Default 2 (kernel ≥
            ~6.8; 0 before).
        poll_allowed: False when the guest turned host polling off by writing 0 to
            `MSR_KVM_POLL_CONTROL` (its own cpuidle-haltpoll driver then polls instead, see
            `Pv.guest_idle_poll_ns`). Default True.
        vm_max_ns: Per-VM maximum set with `KVM_CAP_HALT_POLL` (`override_halt_poll_ns`), ns;
            None (default): not set, `max_ns` applies (kernel `kvm_vcpu_max_halt_poll_ns`).
        v4_start_ns: `"dynamic-v4"` only: the initial window, ns; None (default): the maximum.
            vcpulab reconstruction (v4 was never merged): with 0, v4 never polls, since it grows
            only when an interrupt arrives while polling.
        v4_idle_ns: `"dynamic-v3"` / `"dynamic-v4"`: a halt that slept longer than this is
            "idle" and shrinks the window, ns. Default 10000000 (vcpulab reconstruction: one 100 Hz
            tick; guests ticking at 250 Hz and up are not idle, as in [S5]'s 15 % C0 result).
        v3_start_ns: `"dynamic-v3"` only: the first growth from 0, ns. Default 500000 (the
            review's "0 → 500 µs").
    """

    # BEGIN GENERATED FIELDS (HaltPoll): python -m vcpulab._codegen
    policy: str = "off"
    max_ns: int = 200_000
    grow: int = 2
    grow_start_ns: int = 10_000
    shrink: int = 2
    poll_allowed: bool = True
    vm_max_ns: int | None = field(default=None, metadata=_NEW)
    v4_start_ns: int | None = field(default=None, metadata=_NEW)
    v4_idle_ns: int = field(default=10_000_000, metadata=_NEW)
    v3_start_ns: int = field(default=500_000, metadata=_NEW)
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", halt_poll_policy("HaltPoll", self.policy))
        self._check_fields()

    @property
    def effective_max_ns(self) -> int:
        """``kvm_vcpu_max_halt_poll_ns``: ``vm_max_ns`` if set, else ``max_ns``."""
        return self.max_ns if self.vm_max_ns is None else self.vm_max_ns

    @classmethod
    def from_host(cls, sysfs: str = "/sys/module/kvm/parameters", **kw: Any) -> HaltPoll:
        """A config whose module parameters (``max_ns``, ``grow``,
        ``grow_start_ns``, ``shrink``) not given in ``kw`` are this host's
        (read from ``sysfs``; the kernel default where a file is missing)."""
        host = host_params(sysfs)
        for name, param in PARAM_OF_FIELD.items():
            if kw.get(name) is None:
                kw[name] = host[param]  # the host's, or the kernel default where the file is missing
        return cls(**kw)


#: the kvm module parameter behind each [`HaltPoll`][vcpulab.sim.HaltPoll] field
PARAM_OF_FIELD = {
    "max_ns": "halt_poll_ns",
    "grow": "halt_poll_ns_grow",
    "grow_start_ns": "halt_poll_ns_grow_start",
    "shrink": "halt_poll_ns_shrink",
}
#: Kernel defaults (x86): KVM_HALT_POLL_NS_DEFAULT and the module parameters'
#: initial values in virt/kvm/kvm_main.c, by parameter name; the values are
#: HaltPoll's field defaults, their one home
KERNEL_DEFAULTS = {param: getattr(HaltPoll(), f) for f, param in PARAM_OF_FIELD.items()}


def host_params(sysfs: str | Path = "/sys/module/kvm/parameters") -> dict[str, int]:
    """The host's halt-poll module parameters where it has them, else the
    kernel defaults: {"halt_poll_ns", "halt_poll_ns_grow", "halt_poll_ns_grow_start",
    "halt_poll_ns_shrink"} plus "source" per key in ``host_params.sources``."""
    out: dict[str, int] = {}
    sources: dict[str, str] = {}
    for k, d in KERNEL_DEFAULTS.items():
        try:
            v = module_param(Path(sysfs, k))
        except OSError:
            v = None
        if type(v) is int:
            out[k] = v
            sources[k] = f"host ({sysfs}/{k})"
        else:  # absent, unreadable, or not a number
            out[k] = d
            sources[k] = "kernel default"
    host_params.sources = sources  # type: ignore[attr-defined]
    return out
