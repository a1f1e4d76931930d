"""The host's other load during a real run: [`OtherLoad`][vcpulab.twins.OtherLoad] (the machine's other
tasks, short and long, and the experiment's own VMM thread) and how it is measured
(every task's schedstat before and after the run, the VMM side while it runs)."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from vcpulab import _procfs


def _task_schedstat() -> dict[int, tuple[int, int]]:
    """tid → (CPU time ns, timeslices) of every task on the machine
    (``/proc/<pid>/task/<tid>/schedstat``, fields 1 and 3)."""
    return {t: (s.cpu_ns, s.timeslices) for t, s in _procfs.every_task_schedstat().items()}


@dataclass(frozen=True)
class OtherLoad:
    """What the machine's other tasks did during a real run, as the twin needs it.

    Measured from every other task's ``/proc/<pid>/task/<tid>/schedstat``
    (CPU time and timeslices) before and after the run, and the run's
    [`Quality`][vcpulab.quality.Quality] (the share of *its* CPUs' time other
    tasks took). Each other task is classed by its mean burst over the run
    (CPU time / timeslices):

    * **short** (mean burst < ``base_slice_ns``): tasks that give the CPU up
      by sleeping (shells, editors, build drivers, kworkers). Each of their
      bursts begins with a wake-up that may preempt a vCPU thread (EEVDF
      wake-up preemption, ``check_preempt_wakeup_fair``).
    * **long** (mean burst ≥ ``base_slice_ns``): CPU-bound tasks (compilers,
      test suites) that run until a slice ends.

    The experiment's own process is measured too: its threads other than the
    vCPUs (the run loop that samples the stats every 10 ms and checks for
    Ctrl-C every 5 ms, ``src/kvm/experiment.rs``; polars' pool) are the VMM
    thread of the twin (``HostNoise.vmm_io_*``), measured by
    `_VmmProbe` between 20 % and 80 % of the run, so that the set-up
    and teardown of the VM are not counted.

    Attributes:
        share: other tasks' share of the run's CPUs' time (``Quality.other_share``;
            it includes the VMM thread's time on those CPUs), 0-1, at most what
            the other tasks' CPU time allows (`measure`'s ``window``).
        short_fraction: the short tasks' part of the others' CPU time, machine-wide, 0-1.
        short_burst_ns: the short tasks' mean burst, ns (their CPU time / timeslices).
        long_burst_ns: the long tasks' mean burst, ns (NaN when none ran).
        short_tasks, long_tasks: how many tasks of each class ran.
        base_slice_ns: the class boundary used, ns.
        vmm_wakeups_per_s: timeslices per second of the experiment's own
            non-vCPU threads (0: not measured).
        vmm_burst_ns: their CPU time per timeslice, ns (NaN: not measured).
        quality_share: ``Quality.other_share`` as measured, before that bound
            (NaN: not recorded).

    Simplification: the mix of short and long work is measured machine-wide
    (per-task schedstat has no per-CPU split, and this kernel has no
    ``/proc/schedstat``, CONFIG_SCHEDSTATS) and assumed the same on every CPU.
    """

    share: float
    short_fraction: float
    short_burst_ns: float
    long_burst_ns: float
    short_tasks: int
    long_tasks: int
    base_slice_ns: float
    vmm_wakeups_per_s: float = 0.0
    vmm_burst_ns: float = float("nan")
    quality_share: float = float("nan")

    def __post_init__(self) -> None:
        if not 0.0 <= self.share < 1.0:
            raise ValueError(f"OtherLoad.share must be in [0, 1), got {self.share}")
        if not 0.0 <= self.short_fraction <= 1.0:
            raise ValueError(f"OtherLoad.short_fraction must be in [0, 1], got {self.short_fraction}")
        if self.short_fraction > 0 and not self.short_burst_ns > 0:
            raise ValueError(f"OtherLoad.short_burst_ns must be > 0 when short_fraction > 0, got {self.short_burst_ns}")

    @classmethod
    def measure(
        cls,
        before: Mapping[int, tuple[int, int]],
        after: Mapping[int, tuple[int, int]],
        own: set[int],
        share: float,
        base_slice_ns: float,
        vmm: tuple[float, float] = (0.0, float("nan")),
        window: tuple[float, int] | None = None,
    ) -> OtherLoad:
        """From two `_task_schedstat` snapshots (tasks in ``own`` left
        out; a task born meanwhile counts from 0, one that exited is missed).

        ``window`` = (the run's wall time, ns; its CPUs): ``share`` is then
        bounded by what the other tasks' CPU time between the snapshots (and
        the VMM thread's measured rate) could have taken of those CPUs.
        ``Quality.other_share`` from cpuidle counts every busy moment that is
        not the run's threads, interrupt handling included; the twin models
        ``share`` as tasks that preempt vCPUs and end halt polls, which
        interrupts do not (the MsiPingPong cell's 200 deliveries in 20-25 ms:
        7-17 % from cpuidle, other tasks 1 % in the trace of the same runs)."""
        sc = ss = lc = ls = 0
        ns_ = nl = 0
        for tid, (c1, s1) in after.items():
            if tid in own:
                continue
            c0, s0 = before.get(tid, (0, 0))
            c, k = max(c1 - c0, 0), max(s1 - s0, 0)
            if k == 0 or c == 0:
                continue
            if c / k < base_slice_ns:
                sc, ss, ns_ = sc + c, ss + k, ns_ + 1
            else:
                lc, ls, nl = lc + c, ls + k, nl + 1
        tot = sc + lc
        measured = min(max(float(share), 0.0), 0.99)
        bounded = measured
        if window is not None and window[0] > 0 and window[1] > 0:
            vmm_share = vmm[0] * vmm[1] / 1e9 if vmm[0] > 0 and vmm[1] == vmm[1] else 0.0
            bounded = min(measured, tot / (window[0] * window[1]) + vmm_share / window[1])
        return cls(
            share=bounded,
            short_fraction=sc / tot if tot else 0.0,
            short_burst_ns=sc / ss if ss else float("nan"),
            long_burst_ns=lc / ls if ls else float("nan"),
            short_tasks=ns_,
            long_tasks=nl,
            base_slice_ns=float(base_slice_ns),
            vmm_wakeups_per_s=float(vmm[0]),
            vmm_burst_ns=float(vmm[1]),
            quality_share=measured,
        )

    @classmethod
    def pooled(cls, loads: Sequence[OtherLoad]) -> OtherLoad | None:
        """Several trials' loads as one: mean share; the short fraction of
        the pooled other time (each trial's short fraction weighted by its
        share: a trial in which the others took nothing adds nothing); mean
        bursts weighted by each trial's short (long) share; None if empty."""
        if not loads:
            return None
        w_s = np.array([x.share * x.short_fraction for x in loads])
        w_l = np.array([x.share * (1 - x.short_fraction) for x in loads])

        def wmean(v: list[float], w: np.ndarray) -> float:
            a = np.array(v, dtype=float)
            ok = (a == a) & (w > 0)
            return float((a[ok] * w[ok]).sum() / w[ok].sum()) if ok.any() else float("nan")

        return cls(
            share=float(np.mean([x.share for x in loads])),
            short_fraction=float(w_s.sum() / (w_s.sum() + w_l.sum())) if w_s.sum() > 0 else 0.0,
            short_burst_ns=wmean([x.short_burst_ns for x in loads], w_s),
            long_burst_ns=wmean([x.long_burst_ns for x in loads], w_l),
            short_tasks=int(round(np.mean([x.short_tasks for x in loads]))),
            long_tasks=int(round(np.mean([x.long_tasks for x in loads]))),
            base_slice_ns=loads[0].base_slice_ns,
            vmm_wakeups_per_s=float(np.mean([x.vmm_wakeups_per_s for x in loads])),
            vmm_burst_ns=wmean([x.vmm_burst_ns for x in loads], np.array([x.vmm_wakeups_per_s for x in loads])),
            quality_share=float(np.mean([x.quality_share for x in loads])),
        )

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class _VmmProbe:
    """Measures the experiment process's own non-vCPU threads (the VMM side)
    while a real run is under way: a helper thread snapshots their schedstat
    at 20 % and 80 % of ``duration_s`` (vCPU threads are recognised by their
    name, ``CPU n/KVM``). `result` gives (timeslices per second, CPU
    ns per timeslice) over that window, or (0, NaN) when the window was not
    reached (a run shorter than planned)."""

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.snaps: list[tuple[float, dict[int, tuple[int, int]]]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._main, name="vcpulab-vmm-probe", daemon=True)

    @staticmethod
    def _snap() -> dict[int, tuple[int, int]]:
        own = _procfs.every_task_schedstat(os.getpid(), skip_comm_suffix="/KVM")
        return {t: (s.cpu_ns, s.timeslices) for t, s in own.items()}

    def _main(self) -> None:
        import time

        t0 = time.monotonic()
        for frac in (0.2, 0.8):
            if self._stop.wait(max(t0 + frac * self.duration_s - time.monotonic(), 0.0)):
                return
            self.snaps.append((time.monotonic(), self._snap()))
        # lives until the run has ended: a thread that went during the run
        # leaves Run.quality's census of every task incomplete (its last CPU
        # time is unknown), which would keep the cpuidle estimate unbounded
        self._stop.wait()

    def __enter__(self) -> _VmmProbe:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()

    def result(self) -> tuple[float, float]:
        if len(self.snaps) < 2:
            return 0.0, float("nan")
        (t0, a), (t1, b) = self.snaps
        cpu = slices = 0
        for tid, (c1, s1) in b.items():
            c0, s0 = a.get(tid, (c1, s1))
            cpu += max(c1 - c0, 0)
            slices += max(s1 - s0, 0)
        if self._t.native_id in b and self._t.native_id in a:  # not the probe's own wake-ups
            cpu -= b[self._t.native_id][0] - a[self._t.native_id][0]
            slices -= b[self._t.native_id][1] - a[self._t.native_id][1]
        if slices <= 0 or t1 <= t0:
            return 0.0, float("nan")
        return slices / (t1 - t0), cpu / slices
