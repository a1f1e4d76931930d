"""The argument checks of [`run`][vcpulab.experiment.run], made before anything is created
(``QUALITY_THRESHOLDS``, ``_check_run_args``, ``_check_scheduler``). Imports the workloads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vcpulab import _core
from vcpulab import sched as _sched
from vcpulab._checks import check_bool, check_float, check_int, check_seq, check_type
from vcpulab.experiment._workloads import (
    MAX_DURATION_S,
    MAX_VCPUS,
    IpiPingPong,
    MsiPingPong,
    Spin,
    SpinLock,
    Workload,
)
from vcpulab.kvm import Host


def _check_quality_thresholds(qt: Any) -> None:
    if qt is None:
        return
    if not isinstance(qt, Mapping):
        raise TypeError(
            f"quality_thresholds must be a mapping of {sorted(QUALITY_THRESHOLDS)} to shares, got "
            f"{type(qt).__name__} {qt!r}"
        )
    bad = sorted(set(qt) - QUALITY_THRESHOLDS)
    if bad:
        raise ValueError(f"quality_thresholds: unknown key(s) {bad}; expected {sorted(QUALITY_THRESHOLDS)}")
    for k, v in qt.items():
        check_float(f"quality_thresholds[{k!r}]", v, 0.0, 1.0, unit="(a share of the run's CPU time)")


#: the keys ``run(quality_thresholds=...)`` takes (the thresholds of vcpulab.quality.quality)
QUALITY_THRESHOLDS = frozenset({"max_other_share", "max_alone_delay_share"})


def _check_run_args(
    workload: Any,
    vcpus: Any,
    vms: Any,
    duration_s: Any,
    sample_every_s: Any,
    memory_mib: Any,
    halt_poll_ns: Any,
    steal_time: Any,
    poll_every_s: Any,
    pcpus: Any,
    placement: Any,
    host: Any,
    quality_thresholds: Any = None,
    trace: Any = False,
    trace_max_events: Any = 1,
    warn_quality: Any = False,
    trace_kvm_events: Any = True,
) -> None:
    """Every argument of [`run`][vcpulab.experiment.run], checked before anything is created."""
    from vcpulab.kvm import MAX_MEMORY_MIB

    check_type("workload", workload, Workload)
    check_int("vcpus", vcpus, 1, MAX_VCPUS)
    check_int("vms", vms, 1, 64)
    check_float("duration_s", duration_s, 0.0, MAX_DURATION_S, lo_open=True, unit="s")
    if sample_every_s is not None:
        check_float("sample_every_s", sample_every_s, 1e-5, 86_400.0, unit="s")
    check_int("memory_mib", memory_mib, 2, MAX_MEMORY_MIB)
    if halt_poll_ns is not None:
        check_int("halt_poll_ns", halt_poll_ns, 0, 2**32 - 1)
    check_bool("steal_time", steal_time)
    check_float("poll_every_s", poll_every_s, 0.0, 1.0, lo_open=True, unit="s (Ctrl-C must stop a run within a second)")
    if pcpus is not None and (isinstance(pcpus, (str, bytes)) or not hasattr(pcpus, "__iter__")):
        one = isinstance(pcpus, (int, np.integer)) and not isinstance(pcpus, bool) and pcpus >= 0
        example = f"pcpus=[{int(pcpus)}] for host CPU {int(pcpus)}" if one else "pcpus=[0, 1]"
        raise TypeError(f"pcpus must be a list of host CPU ids, e.g. {example}; got {type(pcpus).__name__} {pcpus!r}")
    for name, lists in (("pcpus", None if pcpus is None else [pcpus]), ("placement", placement)):
        if lists is None:
            continue
        lists = check_seq(name, lists, "host CPU numbers" if name == "pcpus" else "lists of host CPU numbers")
        for cl in lists:
            if isinstance(cl, (str, bytes)) or not hasattr(cl, "__iter__"):
                raise TypeError(f"{name} must hold sequences of host CPU numbers, got {cl!r}")
            for c in cl:
                check_int(f"{name} entry", c, 0, 2**16)
    if host is not None:
        check_type("host", host, Host)
    _check_quality_thresholds(quality_thresholds)
    check_bool("trace", trace)
    check_int("trace_max_events", trace_max_events, 1, 1 << 32)
    check_bool("trace_kvm_events", trace_kvm_events)
    check_bool("warn_quality", warn_quality)
    gap = getattr(workload, "gap_us", None)
    if isinstance(workload, (MsiPingPong, IpiPingPong)) and isinstance(gap, (int, float)) and gap * 1e-6 >= duration_s:
        raise ValueError(
            f"{type(workload).__name__}.gap_us = {gap:g} µs is not shorter than the run (duration_s = {duration_s:g} s): "
            "no round could complete"
        )


def _check_scheduler(
    scheduler: Any, workload: Workload, vcpus: Any, vms: Any, pcpus: Any, placement: Any
) -> _sched.Scheduler:
    """``run``'s scheduler argument, checked against the rest before anything is created."""
    if scheduler is None:
        return _sched.host()
    check_type("scheduler", scheduler, _sched.Scheduler)
    if scheduler.is_host:
        return scheduler
    name = scheduler.name
    if placement is not None and not isinstance(scheduler, _sched.Pinned):
        raise ValueError(f"scheduler={name}: pass pcpus (the CPUs it schedules on), not placement: it places the vCPUs")
    if placement is not None:
        many = [i for i, cl in enumerate(placement) if len(cl) != 1]
        if many:
            raise ValueError(
                f"scheduler=pinned: placement pins each vCPU to one host CPU (its home); vCPU thread {many[0]} has "
                f"{len(placement[many[0]])}"
            )
    if not (workload.pv_exits or isinstance(workload, Spin)):
        raise ValueError(
            f"scheduler={name}: {type(workload).__name__} halts in the kernel without vcpulab's halt brackets; "
            "under vcpulab's scheduler SpinLock, PvSpinLock, WakePlacement and Spin run (use sched.host() for the "
            "others)"
        )
    if workload.forced_bytes:
        raise ValueError(
            f"scheduler={name}: {type(workload).__name__}'s *_from_host writes steal-time bytes by hand; the "
            "scheduler sets preempted while a vCPU holds no token and is_idle while its last CPU holds none"
        )
    if isinstance(scheduler, _sched.DirectedYield) and not isinstance(workload, SpinLock):
        raise ValueError(
            f"scheduler={name}: directed yield acts at pv spin exits, which only the spin-lock workloads make"
        )
    n_cpus = len(set(pcpus)) if pcpus is not None else len(_core.allowed_cpus())
    if isinstance(scheduler, (_sched.Gang, _sched.Balance)) and int(vcpus) > n_cpus:
        raise ValueError(
            f"scheduler={name}: each VM's {vcpus} vCPUs must fit the {n_cpus} host CPUs (its siblings run on "
            "distinct CPUs)"
        )
    return scheduler
