"""Overcommit experiments on real KVM: guest workloads, pinned vCPU threads,
live sampling.

::

    from vcpulab.experiment import SpinLock, run

    r = run(SpinLock(kind="ticket", hold=40, think=40), vcpus=4, pcpus=[0], duration_s=1.0)
    r.results          # one row per vCPU: acquisitions, pauses, waits …
    r.samples          # t_ns, vm, vcpu, steal_ns, preempted, every vCPU stat
    r.deltas()         # the same, per sampling interval
    r.threads          # per vCPU thread: CPU time, run delay, context switches

Every vCPU runs on its own OS thread, pinned with ``sched_setaffinity`` to the
host CPUs of its placement, with the GIL released; the calling thread samples
steal time (a memory read) and the vCPU stats (one ``pread`` per vCPU). Every
run has a hard deadline; Ctrl-C stops all vCPUs within ``poll_every`` and raises
``KeyboardInterrupt`` after the threads are joined.

Workloads are guest programs assembled in Rust (``src/kvm/guest/program.rs``);
each class below documents its parameters (units: loop iterations of the
emulated guest, µs, Hz) and the result columns it returns.
"""

from __future__ import annotations

# typing.get_type_hints reads a class's annotations in the module its __module__ names (this one,
# set below): Any, ClassVar, Literal, pl and Quality are here for them
from typing import Any, ClassVar, Literal  # noqa: F401

import polars as pl  # noqa: F401

# the package's topic modules, each importing only those before it: _workloads (the guest
# programs and the limits), _args (run's argument checks), _results (Run, Trials, t_critical),
# _runner (run). This module re-exports their public names.
from vcpulab.experiment._args import QUALITY_THRESHOLDS
from vcpulab.experiment._args import _check_scheduler as _check_scheduler  # private, for twins.Experiment
from vcpulab.experiment._results import CONFIDENCE_LEVELS, Run, Trials, t_critical
from vcpulab.experiment._runner import machine_provenance, provenance, run
from vcpulab.experiment._workloads import (
    GRACE_S,
    MAX_DURATION_S,
    MAX_VCPUS,
    IdleTicks,
    IpiPingPong,
    MsiPingPong,
    PvSpinLock,
    Spin,
    SpinLock,
    WakePlacement,
    Workload,
)
from vcpulab.quality import Quality, QualityWarning  # noqa: F401

__all__ = [
    "CONFIDENCE_LEVELS",
    "GRACE_S",
    "IdleTicks",
    "IpiPingPong",
    "MAX_DURATION_S",
    "MAX_VCPUS",
    "MsiPingPong",
    "PvSpinLock",
    "QUALITY_THRESHOLDS",
    "QualityWarning",
    "Run",
    "Spin",
    "SpinLock",
    "Trials",
    "WakePlacement",
    "Workload",
    "machine_provenance",
    "provenance",
    "run",
    "t_critical",
]

# the public names of what the topic modules define (reprs, pickles and the docs say vcpulab.experiment.X)
for _obj in (
    Workload,
    SpinLock,
    PvSpinLock,
    MsiPingPong,
    IpiPingPong,
    IdleTicks,
    Spin,
    WakePlacement,
    Run,
    Trials,
    t_critical,
    run,
    provenance,
    machine_provenance,
):
    _obj.__module__ = __name__
del _obj
