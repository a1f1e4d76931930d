"""Experiments: a real-KVM [`Experiment`][vcpulab.twins.Experiment] (a workload on N vCPUs pinned to
host CPUs), described so that it can be run and twinned."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from typing import Any, Literal

from vcpulab._checks import PCPUS_RENAMED, check_float, check_int, check_type, renamed_since
from vcpulab.experiment import (
    IdleTicks,
    IpiPingPong,
    MsiPingPong,
    PvSpinLock,
    Run,
    Spin,
    SpinLock,
    WakePlacement,
    Workload,
)

#: why ``cpus=`` became ``pcpus=`` (the DeprecationWarnings say it)
_ONE_NAME = "one name for host CPU lists everywhere"


@dataclass(frozen=True)
class Experiment:
    """A real-KVM experiment, described so that it can be run and twinned.

    Attributes:
        workload: a [`vcpulab.experiment`][] workload.
        vcpus: vCPUs of the one VM.
        pcpus: host CPUs used (``cpus=`` before 2026-12-01: still accepted,
            with a DeprecationWarning).
        pinning: ``"shared"`` (every vCPU thread may run on all of ``pcpus``:
            ``run(pcpus=pcpus)``) or ``"one_each"`` (vCPU i pinned to
            ``pcpus[i % len(pcpus)]``: ``run(placement=…)``).
        duration_s: seconds of the real run (and of the simulated one).
        halt_poll_ns: per-VM maximum halt-poll time; None = the module parameter.
        scheduler: who schedules the vCPU threads ([`vcpulab.sched`][vcpulab.sched]; None:
            the host's kernel). Under vcpulab's scheduler the vCPUs share
            ``pcpus`` (its run tokens), whatever ``pinning`` says.
        homes: under [`sched.pinned`][vcpulab.sched.pinned], vCPU i's home
            CPU, one of ``pcpus`` (``run(placement=[[h] for h in homes])``);
            None (the default): ``pcpus[i mod n]``, the scheduler's own
            homes. Only with ``sched.pinned``.
    """

    workload: Workload
    vcpus: int = 2
    pcpus: tuple[int, ...] = (0,)
    pinning: Literal["shared", "one_each"] = "one_each"
    duration_s: float = 0.3
    halt_poll_ns: int | None = None
    scheduler: Any = None
    homes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        from vcpulab.experiment import MAX_DURATION_S, MAX_VCPUS

        check_type("Experiment.workload", self.workload, Workload)
        check_int("Experiment.vcpus", self.vcpus, 1, MAX_VCPUS)
        if isinstance(self.pcpus, (str, bytes)) or not hasattr(self.pcpus, "__iter__"):
            raise TypeError(f"Experiment.pcpus must be a sequence of host CPU ids, e.g. (0,), got {self.pcpus!r}")
        object.__setattr__(self, "pcpus", tuple(check_int("Experiment.pcpus entry", c, 0, 2**16) for c in self.pcpus))
        if not self.pcpus or len(set(self.pcpus)) != len(self.pcpus):
            raise ValueError(f"Experiment.pcpus must name distinct host CPUs, got {self.pcpus}")
        if self.pinning not in ("shared", "one_each"):
            raise ValueError(f"Experiment.pinning must be 'shared' or 'one_each', got {self.pinning!r}")
        check_float("Experiment.duration_s", self.duration_s, 0.0, MAX_DURATION_S, lo_open=True, unit="s")
        if self.halt_poll_ns is not None:
            check_int("Experiment.halt_poll_ns", self.halt_poll_ns, 0, 2**32 - 1)
        self.workload.check(self.vcpus, True)
        from vcpulab.experiment import _check_scheduler

        s = _check_scheduler(self.scheduler, self.workload, self.vcpus, 1, list(self.pcpus), None)
        object.__setattr__(self, "scheduler", None if s.is_host else s)
        if self.scheduler is not None:
            object.__setattr__(self, "pinning", "shared")
        if self.homes is not None:
            from vcpulab import sched

            if not isinstance(self.scheduler, sched.Pinned):
                raise ValueError(
                    "Experiment.homes is for scheduler=sched.pinned() (the other schedulers place the vCPUs)"
                )
            if isinstance(self.homes, (str, bytes)) or not hasattr(self.homes, "__iter__"):
                raise TypeError(
                    f"Experiment.homes must be a sequence of host CPU ids, one per vCPU, got {self.homes!r}"
                )
            homes = tuple(check_int("Experiment.homes entry", c, 0, 2**16) for c in self.homes)
            if len(homes) != self.vcpus:
                raise ValueError(f"Experiment.homes needs one CPU per vCPU ({self.vcpus}), got {len(homes)}")
            stray = sorted(set(homes) - set(self.pcpus))
            if stray:
                raise ValueError(f"Experiment.homes names CPU(s) {stray}, not in pcpus {list(self.pcpus)}")
            object.__setattr__(self, "homes", homes)

    def check_runnable(self) -> None:
        """ValueError naming the CPUs when this process may not run on all of
        ``pcpus`` (checked before any real trial, not when the experiment is
        described: a twin needs no such CPU)."""
        from vcpulab import _core

        allowed = set(_core.allowed_cpus())
        missing = sorted(set(self.pcpus) - allowed)
        if missing:
            raise ValueError(
                f"Experiment.pcpus {list(self.pcpus)}: host CPU(s) {missing} are not usable here; this process may run "
                f"on {sorted(allowed)}"
            )

    def placement(self) -> list[list[int]]:
        if self.pinning == "shared" or self.scheduler is not None:
            return [list(self.pcpus)] * self.vcpus
        return [[self.pcpus[i % len(self.pcpus)]] for i in range(self.vcpus)]

    @property
    def cpus(self) -> tuple[int, ...]:
        """Deprecated name of ``pcpus`` (since 2026-12-01)."""
        warnings.warn(
            f"Experiment.cpus is deprecated since {PCPUS_RENAMED}; use Experiment.pcpus (one name for host CPU lists)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.pcpus

    def run(self, **kw: Any) -> Run:
        """Run it on real KVM (``vcpulab.experiment.run``)."""
        from vcpulab.experiment import run

        where: dict[str, Any] = (
            {"pcpus": list(self.pcpus), "scheduler": self.scheduler}
            if self.scheduler is not None
            else {"placement": self.placement()}
        )
        if self.homes is not None:
            where = {"placement": [[h] for h in self.homes], "scheduler": self.scheduler}
        return run(
            self.workload,
            vcpus=self.vcpus,
            duration_s=self.duration_s,
            halt_poll_ns=self.halt_poll_ns,
            **where,
            **kw,
        )

    @classmethod
    def from_run(cls, r: Run) -> Experiment:
        """The experiment a real [`Run`][vcpulab.experiment.Run] ran."""
        cfg = r.config
        if cfg.get("vms", 1) != 1:
            raise ValueError(f"twins describe one-VM runs; this run had {cfg.get('vms')} VMs")
        wd = dict(cfg["workload"])
        prog = wd.pop("workload")
        classes = {
            c.program: c for c in (SpinLock, PvSpinLock, MsiPingPong, IpiPingPong, IdleTicks, Spin, WakePlacement)
        }
        if prog not in classes:
            raise ValueError(f"no twin for workload program {prog!r}")
        wcls = classes[prog]
        names = {f.name for f in fields(wcls)}  # type: ignore[arg-type]
        kw: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in wd.items() if k in names}
        w: Workload = wcls(**kw)
        n = int(cfg["vcpus"])
        from vcpulab import sched

        s = sched.from_config(cfg.get("scheduler"))
        if not s.is_host:
            cpus_all = sorted({c for cl in r.placement.values() for c in cl})
            homes = [r.placement[(0, i)] for i in range(n)]
            own: tuple[int, ...] | None = None
            if isinstance(s, sched.Pinned) and any(len(h) == 1 for h in homes):
                if any(len(h) != 1 for h in homes):
                    raise ValueError(
                        f"twins describe sched.pinned runs with one home CPU per vCPU; this run had {homes}"
                    )
                if homes != [[cpus_all[i % len(cpus_all)]] for i in range(n)]:
                    own = tuple(h[0] for h in homes)
            return cls(w, n, tuple(cpus_all), "shared", float(cfg["duration_s"]), cfg.get("halt_poll_ns"), s, own)
        lists = [list(r.placement[(0, i)]) for i in range(n)]
        cpus = sorted({c for cl in lists for c in cl})
        if all(cl == lists[0] for cl in lists) and (len(lists[0]) > 1 or len(cpus) == 1):
            return cls(w, n, tuple(lists[0]), "shared", float(cfg["duration_s"]), cfg.get("halt_poll_ns"))
        if all(len(cl) == 1 for cl in lists):
            order = [cl[0] for cl in lists]
            first = tuple(dict.fromkeys(order))
            if all(order[i] == first[i % len(first)] for i in range(n)):
                return cls(w, n, first, "one_each", float(cfg["duration_s"]), cfg.get("halt_poll_ns"))
        raise ValueError(
            f"placement {lists} has no twin: use one CPU list shared by all vCPUs, or one CPU each round robin"
        )


# the field was `cpus` before 2026-12-01: Experiment(cpus=...) still works, with a DeprecationWarning
Experiment.__init__ = renamed_since(PCPUS_RENAMED, _ONE_NAME, name="Experiment", cpus="pcpus")(  # type: ignore[method-assign]
    Experiment.__init__
)
