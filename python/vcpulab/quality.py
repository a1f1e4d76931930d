"""How trustworthy a real-KVM measurement is: what else ran on its CPUs.

A real run shares its host CPUs with every other task of the machine. KVM's
halt polling stops the moment another task is runnable on the vCPU's CPU
(``single_task_running()`` in ``kvm_vcpu_halt``, virt/kvm/kvm_main.c), steal
time grows with every other task that takes the CPU, and latencies gain the
other task's slice. [`Quality`][vcpulab.quality.Quality] records, for one run, how much of that
happened, from sources that need no tracing:

* **other tasks' time on the run's CPUs** (``other_busy_ns``): each CPU's busy
  time over the run minus the CPU time of the run's own threads. Busy time is
  the wall time minus the CPU's idle residency from cpuidle
  (``/sys/devices/system/cpu/cpuN/cpuidle/stateK/time``, µs; see the kernel's
  Documentation/admin-guide/pm/cpuidle.rst), or, where cpuidle is absent,
  ``/proc/stat`` busy ticks (USER_HZ: 10 ms resolution, so short runs read
  coarsely; ``source`` says which). Interrupt handling on an idle CPU, and
  the way out of idle and back, count as busy: a halting guest's wake-ups
  read as other tasks' time. So the estimate is bounded by what every other
  task of the machine ran (``other_tasks_ns``), from a
  [`census`][vcpulab.quality.census] of every task's schedstat before and
  after the run, where the two saw every task (none went, none was born and
  went unseen, ``/proc`` shows the whole machine); docs/real_kvm.md has the
  measurement.
* **run delay of threads alone on their CPU** (``alone_run_delay_ns``): a
  thread that no other thread of the run shares a CPU with waits on the run
  queue only for other tasks (``/proc/<pid>/task/<tid>/schedstat``, field 2, ns).
* **steal against the fair share** (``steal_excess``, for runs with steal
  time): each vCPU's steal fraction minus ``1 − cpus/vcpu_threads`` of its
  CPU group, the share it would lose to the run's own vCPU threads on those
  CPUs if all were always runnable; positive values mean other tasks took
  time too. Only vCPU threads count as competitors: vcpulab's own host
  driver thread (unpinned when the vCPUs use every allowed CPU) mostly sleeps,
  and counting it made 2 always-runnable vCPUs on one CPU (steal 0.49-0.51)
  read −17 % against a fair share of 2/3 instead of 1/2.
* **CPU pressure** (``psi_cpu_some_share``): the machine-wide share of time
  some task waited for a CPU (``/proc/pressure/cpu``, Documentation/accounting/psi.rst);
  recorded, not judged (the run's own overcommit raises it).
* **frequency throttling**: ``/sys/devices/system/cpu/cpuN/cpufreq`` where it
  exists (``freq_min_khz`` of the run's CPUs at the end); ``None`` where the
  host does not expose it (virtual machines usually do not).

A run is *disturbed* when other tasks took more than ``max_other_share`` of the
run's CPU time, or threads alone on their CPU waited more than
``max_alone_delay_share`` of the wall time (both default 2 %). Measured on the
project's 2-CPU machine (2026-12-01, shared by other build jobs): halt-poll
cells in quiet moments read 0.0-1.7 % other time (interrupts, kernel threads);
a Python busy loop pinned to the run's CPU read 89-94 %; the machine's normal
load then read 30-97 %. The 2 % threshold sits above the quiet readings and is
far below what changes results: a halt-polling run loses polls as soon as
another task is runnable at all. ``Quality.reasons`` names each threshold
crossed with the measured value; [`QualityWarning`][vcpulab.quality.QualityWarning] carries them to the
user.
"""

from __future__ import annotations

import numbers
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from vcpulab import _procfs
from vcpulab._checks import PCPUS_RENAMED, check_float, check_int, check_seq, check_type, renamed_since

__all__ = [
    "MAX_ALONE_DELAY_SHARE",
    "MAX_OTHER_SHARE",
    "Census",
    "Quality",
    "QualityWarning",
    "Snapshot",
    "census",
    "measure_cpus",
    "other_tasks_ns",
    "quality",
    "snapshot",
    "thread_schedstat",
]

#: default threshold: other tasks' share of the run's CPU time above which a run is disturbed (a fraction)
MAX_OTHER_SHARE = 0.02
#: default threshold: run delay of threads alone on their CPU, as a share of wall time (a fraction)
MAX_ALONE_DELAY_SHARE = 0.02

#: why ``cpus=`` became ``pcpus=`` (the DeprecationWarnings say it)
_ONE_NAME = "one name for host CPU lists everywhere"


class QualityWarning(UserWarning):
    """A real-KVM measurement was disturbed by other work on its CPUs; the
    message names what was measured (see [`Quality`][vcpulab.quality.Quality])."""


def thread_schedstat(tid: int, pid: int | None = None) -> tuple[int, int, int]:
    """(CPU time ns, run delay ns, timeslices) of thread ``tid`` of process
    ``pid`` (default: this one), from ``/proc/<pid>/task/<tid>/schedstat``."""
    return _procfs.task_schedstat(tid, pid)


@dataclass(frozen=True)
class Snapshot:
    """Per-CPU counters at one instant (see [`snapshot`][vcpulab.quality.snapshot])."""

    t_ns: int
    source: str
    #: per CPU: cumulative idle ns (cpuidle) or busy ns (/proc/stat)
    counters: dict[int, int]
    psi_some_us: int | None
    #: per thread id: (CPU time ns, run delay ns)
    threads: dict[int, tuple[int, int]] = field(default_factory=dict)


@renamed_since(PCPUS_RENAMED, _ONE_NAME, cpus="pcpus")
def snapshot(pcpus: Iterable[int], tids: Iterable[int] = ()) -> Snapshot:
    """Reads the counters [`quality`][vcpulab.quality.quality] compares: idle (or busy) time of
    each CPU in ``pcpus``, machine-wide CPU pressure, and the schedstat of each
    thread of this process in ``tids``."""
    cpus = sorted({check_int("pcpus entry", c, 0, 2**16) for c in check_seq("pcpus", pcpus, "host CPU numbers")})
    tids = [check_int("tids entry", t, 1, 2**31 - 1) for t in check_seq("tids", tids, "thread ids")]
    idle = {c: _procfs.cpuidle_us(c) for c in cpus}
    t = time.monotonic_ns()
    if cpus and all(v is not None for v in idle.values()):
        source, counters = "cpuidle", {c: int(v) * 1000 for c, v in idle.items()}  # type: ignore[arg-type]
    else:
        source, counters = "/proc/stat", _procfs.proc_stat_busy_ns(cpus)
    threads: dict[int, tuple[int, int]] = {}
    for tid in tids:
        try:
            c, d, _ = thread_schedstat(tid)
            threads[tid] = (c, d)
        except OSError:
            pass
    return Snapshot(t_ns=t, source=source, counters=counters, psi_some_us=_procfs.psi_cpu_some_us(), threads=threads)


@dataclass(frozen=True)
class Census:
    """Every task of the machine at one instant (see [`census`][vcpulab.quality.census])."""

    #: thread id → CPU time, ns (``/proc/<pid>/task/<tid>/schedstat``, field 1), of every task
    cpu_ns: dict[int, int]
    #: tasks created since boot, every process and thread (``/proc/stat``
    #: ``processes``), read before the tasks and after them
    forks_first: int
    forks_last: int


def census() -> Census | None:
    """Reads every task's CPU time and the count of tasks ever created, for
    [`quality`][vcpulab.quality.quality]'s ``census``: one file per task,
    about 35 µs each here (3.5 ms for the 107 tasks of this project's
    machine; `run` takes one before and one after its timed window). None where the reading cannot see
    every task: ``/proc/stat`` has no ``processes`` line, this process runs
    in a child PID namespace (a container), or ``/proc`` hides other users'
    processes (``hidepid``)."""
    if not _procfs.proc_shows_every_task():
        return None
    f0 = _procfs.forks_total()
    if f0 is None:
        return None
    tasks = {t: s.cpu_ns for t, s in _procfs.every_task_schedstat().items()}
    f1 = _procfs.forks_total()
    if f1 is None:
        return None
    return Census(cpu_ns=tasks, forks_first=f0, forks_last=f1)


def other_tasks_ns(before: Census, after: Census, own: Iterable[int] = (), born: Iterable[int] = ()) -> int | None:
    """The CPU time every task but ``own`` took between two censuses, ns,
    machine-wide; a task born between them counts from 0. None when the
    censuses cannot see all of it: a task not in ``own`` went between them
    (its last CPU time is unknown), or a task was born and went between them
    (a compiler of a build: in neither census), which shows as more tasks
    created than the second census has new ones plus the caller's own tasks
    born meanwhile and gone (``born``: thread ids the caller created between
    the censuses; the kernel's own children of the run, such as KVM's
    per-VM worker started at the first ``KVM_RUN``, are new tasks that the
    second census lists)."""
    mine = set(own)
    new = sum(1 for t in after.cpu_ns if t not in before.cpu_ns)
    # a named thread the first census lists was not born between them
    gone_own = len({t for t in born if t not in after.cpu_ns and t not in before.cpu_ns})
    # from before the first reading to after the second: a task born while
    # either census read may be missing from it, so it counts as unseen
    unseen = after.forks_last - before.forks_first - new - gone_own
    if unseen > 0:
        return None
    if any(t not in after.cpu_ns and t not in mine for t in before.cpu_ns):
        return None
    return sum(max(ns - before.cpu_ns.get(t, 0), 0) for t, ns in after.cpu_ns.items() if t not in mine)


@dataclass(frozen=True)
class Quality:
    """What disturbed one real run (module docstring: sources and thresholds).

    Times in ns, shares as fractions of the run's CPU time (``other_share``)
    or of its wall time (the others).
    """

    wall_ns: int
    cpus: tuple[int, ...]
    #: how other tasks' time was measured: "trace" (sched_switch, exact), "cpuidle"
    #: (µs residency) or "/proc/stat" (10 ms ticks)
    source: str
    #: per CPU: busy ns not spent in the run's own threads (threads spanning several
    #: CPUs are subtracted from their CPUs' total)
    other_busy_ns: dict[int, int]
    #: sum(other_busy_ns) / (wall_ns × len(cpus))
    other_share: float
    #: run delay of threads that had a CPU to themselves, summed, ns
    alone_run_delay_ns: int
    #: alone_run_delay_ns / (wall_ns × number of such threads); None when no thread was alone
    alone_delay_share: float | None
    #: mean over vCPUs of steal fraction − fair share; None without steal time
    steal_excess: float | None
    #: machine-wide share of the wall time some task waited for a CPU (PSI); None without PSI
    psi_cpu_some_share: float | None
    #: lowest current frequency of the run's CPUs, kHz; None where cpufreq is not exposed
    freq_min_khz: int | None
    max_other_share: float = MAX_OTHER_SHARE
    max_alone_delay_share: float = MAX_ALONE_DELAY_SHARE
    #: why a traced run's trace was not used for ``other_busy_ns`` (it is
    #: truncated: [`vcpulab.tracing.TraceFrames.describe_truncation`][]); None otherwise
    trace_truncated: str | None = None
    #: every other task's CPU time over the run, machine-wide, ns, from two
    #: [`census`][vcpulab.quality.census]es that saw every task (no task went
    #: and none was born but the run's own); ``other_busy_ns`` is then at most
    #: this. None: not measured, or a census could not see every task
    other_tasks_ns: int | None = None

    #: what [`source`][vcpulab.quality.Quality.source] says for a Quality
    #: nobody measured ([`not_measured`][vcpulab.quality.Quality.not_measured])
    NOT_MEASURED: ClassVar[str] = "not measured"

    @classmethod
    def not_measured(cls) -> Quality:
        """The quality of a run nobody measured (a ``Run`` built by hand):
        no CPUs, nothing disturbed, [`measured`][vcpulab.quality.Quality.measured] false."""
        return cls(
            wall_ns=0,
            cpus=(),
            source=cls.NOT_MEASURED,
            other_busy_ns={},
            other_share=0.0,
            alone_run_delay_ns=0,
            alone_delay_share=None,
            steal_excess=None,
            psi_cpu_some_share=None,
            freq_min_khz=None,
        )

    @property
    def measured(self) -> bool:
        """False for [`not_measured`][vcpulab.quality.Quality.not_measured]'s placeholder."""
        return self.source != self.NOT_MEASURED

    @property
    def reasons(self) -> tuple[str, ...]:
        """One sentence per threshold crossed, with the measured value."""
        out = []
        if self.other_share > self.max_other_share:
            per = ", ".join(f"CPU {c}: {v / 1e6:.1f} ms" for c, v in sorted(self.other_busy_ns.items()) if v > 0)
            out.append(
                f"other tasks ran {self.other_share:.1%} of the run's CPU time ({per}; "
                f"threshold {self.max_other_share:.0%}, from {self.source}"
                + (
                    ", at most the other tasks' CPU time)"
                    if self.other_tasks_ns is not None and self.source != "trace"
                    else ")"
                )
            )
        if self.alone_delay_share is not None and self.alone_delay_share > self.max_alone_delay_share:
            out.append(
                f"threads alone on their CPU waited {self.alone_delay_share:.1%} of the wall time on the run queue "
                f"({self.alone_run_delay_ns / 1e6:.1f} ms; threshold {self.max_alone_delay_share:.0%})"
            )
        return tuple(out)

    @property
    def disturbed(self) -> bool:
        return bool(self.reasons)

    def line(self) -> str:
        """One line for a terminal: the verdict and the measured values."""
        if not self.measured:
            return "quality: not measured (a Run built by hand)"
        parts = [f"other tasks {self.other_share:.1%} of CPUs {list(self.cpus)}"]
        if self.alone_delay_share is not None:
            parts.append(f"alone-thread run delay {self.alone_delay_share:.1%}")
        if self.steal_excess is not None:
            parts.append(f"steal vs fair share {self.steal_excess:+.1%}")
        if self.psi_cpu_some_share is not None:
            parts.append(f"CPU pressure {self.psi_cpu_some_share:.0%}")
        if self.trace_truncated is not None:
            parts.append(f"from {self.source}: the trace is incomplete")
        verdict = "DISTURBED" if self.disturbed else "clean"
        return f"quality: {verdict} — " + ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["other_busy_ns"] = {str(k): v for k, v in self.other_busy_ns.items()}
        d["cpus"] = list(self.cpus)
        d["disturbed"] = self.disturbed
        d["reasons"] = list(self.reasons)
        return d

    def warn(self, what: str = "real-KVM run", stacklevel: int = 3) -> None:
        """Issue a [`QualityWarning`][vcpulab.quality.QualityWarning] naming the disturbance, if any."""
        if self.disturbed:
            warnings.warn(f"{what} was disturbed: " + "; ".join(self.reasons), QualityWarning, stacklevel=stacklevel)


#: the thresholds quality() takes (fractions), also as measure_cpus(**thresholds)
_THRESHOLDS = ("max_other_share", "max_alone_delay_share")


def _int_map(name: str, m: Any) -> None:
    """A mapping of ints to ints (thread ids or CPUs → ns)."""
    check_type(name, m, Mapping)
    for k, v in m.items():
        check_int(f"{name} key", k, 0)
        check_int(f"{name}[{k}]", v)


def _check_quality_args(
    before: Any,
    after: Any,
    placement: Any,
    own_cpu_ns: Any,
    own_run_delay_ns: Any,
    steal_fraction: Any,
    max_other_share: Any,
    max_alone_delay_share: Any,
    traced_other_ns: Any,
    traced_wall_ns: Any,
    census: Any = None,
    born: Any = (),
    run_tids: Any = (),
) -> None:
    """Every argument of [`quality`][vcpulab.quality.quality], checked before it reads any."""
    check_type("before", before, Snapshot)
    check_type("after", after, Snapshot)
    check_type("placement", placement, Mapping)
    for tid, cl in placement.items():
        check_int("placement key (a thread id)", tid, 0)
        for c in check_seq(f"placement[{tid}]", cl, "host CPU numbers"):
            check_int(f"placement[{tid}] entry", c, 0, 2**16)
    for name, m in (
        ("own_cpu_ns", own_cpu_ns),
        ("own_run_delay_ns", own_run_delay_ns),
        ("traced_other_ns", traced_other_ns),
    ):
        if m is not None:
            _int_map(name, m)
    for i, item in enumerate(check_seq("steal_fraction", steal_fraction, "(CPUs, fraction) pairs")):
        pair = check_seq(f"steal_fraction[{i}]", item, "(CPUs, fraction)")
        if len(pair) != 2:
            raise ValueError(f"steal_fraction[{i}] must be a (CPUs, fraction) pair, got {item!r}")
        for c in check_seq(f"steal_fraction[{i}] CPUs", pair[0], "host CPU numbers"):
            check_int(f"steal_fraction[{i}] CPU", c, 0, 2**16)
        if isinstance(pair[1], bool) or not isinstance(pair[1], numbers.Real):
            raise TypeError(f"steal_fraction[{i}] fraction must be a number, got {type(pair[1]).__name__} {pair[1]!r}")
    check_float("max_other_share", max_other_share, 0.0, 1.0, unit="(a fraction)")
    check_float("max_alone_delay_share", max_alone_delay_share, 0.0, 1.0, unit="(a fraction)")
    if traced_wall_ns is not None:
        check_int("traced_wall_ns", traced_wall_ns, 0, 2**63 - 1)
    if census is not None:
        pair = check_seq("census", census, "(Census or None, Census or None)")
        if len(pair) != 2:
            raise ValueError(f"census must be a (before, after) pair, got {census!r}")
        for i, c in enumerate(pair):
            if c is not None:
                check_type(f"census[{i}]", c, Census)
    for name, tids in (("born", born), ("run_tids", run_tids)):
        for t in check_seq(name, tids, "thread ids"):
            check_int(f"{name} entry", t, 1, 2**31 - 1)


def _other_busy(busy: dict[int, int], own: dict[int, int], placement: Mapping[int, Sequence[int]]) -> dict[int, int]:
    """Other tasks' busy ns per CPU: each CPU's busy time minus the run's own threads' CPU time.

    A thread pinned to one CPU is subtracted from that CPU. Threads free over
    several CPUs are subtracted from those CPUs together: where on them each
    ran is not known. The CPUs a placement links (directly or through
    another thread's) form one group. Its other time is its busy time minus
    its threads' time, split over its CPUs in proportion to their busy time.
    Splitting each thread evenly and clamping each CPU at 0 used to read an
    unpinned thread busy on one CPU as other tasks' time there. Measured on
    2026-12-02: a WakePlacement run whose worker polled one CPU all run read
    19.5 % other time on an idle machine.
    """
    parent = {c: c for c in busy}

    def root(c: int) -> int:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    for cl in placement.values():
        mine = [c for c in cl if c in parent]
        for c in mine[1:]:
            parent[root(c)] = root(mine[0])
    left = {c: 0 for c in busy}  # per group root: busy minus own
    for c, b in busy.items():
        left[root(c)] += b
    for tid, ns in own.items():
        mine = [c for c in placement.get(tid, []) if c in parent]
        if mine:
            left[root(mine[0])] -= ns
    other: dict[int, int] = {}
    for c, b in busy.items():
        r = root(c)
        group_busy = sum(busy[x] for x in busy if root(x) == r)
        n = sum(1 for x in busy if root(x) == r)
        rest = max(left[r], 0)
        other[c] = rest * b // group_busy if group_busy > 0 else rest // n
    return other


def quality(
    before: Snapshot,
    after: Snapshot,
    placement: Mapping[int, Sequence[int]],
    own_cpu_ns: Mapping[int, int] | None = None,
    own_run_delay_ns: Mapping[int, int] | None = None,
    steal_fraction: Sequence[tuple[Sequence[int], float]] = (),
    max_other_share: float = MAX_OTHER_SHARE,
    max_alone_delay_share: float = MAX_ALONE_DELAY_SHARE,
    traced_other_ns: Mapping[int, int] | None = None,
    traced_wall_ns: int | None = None,
    vcpu_threads: Iterable[int] | None = None,
    census: tuple[Census | None, Census | None] | None = None,
    born: Iterable[int] = (),
    run_tids: Iterable[int] = (),
) -> Quality:
    """The [`Quality`][vcpulab.quality.Quality] of the interval between two snapshots.

    Args:
        placement: thread id → the host CPUs it was pinned to (the run's threads).
        own_cpu_ns: thread id → CPU time over the run, ns, where known
            better than the snapshots (a thread that ended before ``after``
            was read; default: from the snapshots' schedstat).
        own_run_delay_ns: thread id → run delay over the run, ns (as
            ``own_cpu_ns``).
        steal_fraction: (CPUs of the vCPU's group, measured steal fraction) per vCPU.
        traced_other_ns: per CPU, ns other tasks ran there, from a scheduler
            trace of the run (exact; ``source`` becomes "trace"), over
            ``traced_wall_ns``; replaces the cpuidle / /proc/stat estimate.
        vcpu_threads: the thread ids of ``placement`` that are vCPU threads:
            the fair share of steal counts only these on each vCPU's CPUs
            (default: every thread of ``placement``). Other threads of the
            run (a host driver) still count as its own time.
        census: (before, after) [`census`][vcpulab.quality.census]es taken
            around the snapshots (the first before ``before``, the second
            after ``after``). Where both saw every task
            ([`other_tasks_ns`][vcpulab.quality.other_tasks_ns], the threads
            of ``placement`` left out), the cpuidle or /proc/stat estimate
            of ``other_busy_ns`` is scaled down to at most the other tasks'
            CPU time: the busy time counts interrupt handling and the way in
            and out of idle, which are no task's (measured, 2026-12-06: an
            MSI ping-pong of 500 halts on one CPU read 4.9 ms other time
            from cpuidle while every other task of the machine ran 1.1 ms).
            A trace's exact value is left as it is.
        born: thread ids of the tasks the run created between the censuses
            (its vCPU and driver threads), which are not other tasks' births.
        run_tids: the run's threads that ``placement`` does not list (the
            thread that runs it: its run loop, which also reads the
            censuses), left out of the other tasks' CPU time.
    """
    _check_quality_args(
        before,
        after,
        placement,
        own_cpu_ns,
        own_run_delay_ns,
        steal_fraction,
        max_other_share,
        max_alone_delay_share,
        traced_other_ns,
        traced_wall_ns,
        census,
        born,
        run_tids,
    )
    wall = max(after.t_ns - before.t_ns, 1)
    cpus = sorted(after.counters)
    if before.source != after.source:
        raise ValueError(f"snapshots from different sources: {before.source} vs {after.source}")
    if before.source == "cpuidle":
        busy = {c: max(wall - (after.counters[c] - before.counters[c]), 0) for c in cpus}
    else:
        busy = {c: max(after.counters[c] - before.counters[c], 0) for c in cpus}
    own: dict[int, int] = {}
    delay: dict[int, int] = {}
    for tid in placement:
        if own_cpu_ns is not None and tid in own_cpu_ns:
            own[tid] = int(own_cpu_ns[tid])
        elif tid in before.threads and tid in after.threads:
            own[tid] = after.threads[tid][0] - before.threads[tid][0]
        if own_run_delay_ns is not None and tid in own_run_delay_ns:
            delay[tid] = int(own_run_delay_ns[tid])
        elif tid in before.threads and tid in after.threads:
            delay[tid] = after.threads[tid][1] - before.threads[tid][1]
    other = _other_busy(busy, own, placement)
    tasks_ns = None
    if census is not None and census[0] is not None and census[1] is not None:
        tasks_ns = other_tasks_ns(census[0], census[1], {*placement, *run_tids}, born)
    total = sum(other.values())
    if tasks_ns is not None and total > tasks_ns and traced_other_ns is None:
        other = {c: v * tasks_ns // total for c, v in other.items()}
    share = sum(other.values()) / (wall * max(len(cpus), 1))
    source = after.source
    if traced_other_ns is not None:
        other = {c: int(traced_other_ns.get(c, 0)) for c in cpus}
        share = sum(other.values()) / (max(traced_wall_ns or wall, 1) * max(len(cpus), 1))
        source = "trace"
    # threads alone on their CPU: pinned to one CPU that no other run thread uses
    users: dict[int, int] = {}
    for cl in placement.values():
        for c in cl:
            users[c] = users.get(c, 0) + 1
    alone = [t for t, cl in placement.items() if len(cl) == 1 and users[cl[0]] == 1 and t in delay]
    alone_ns = sum(delay[t] for t in alone)
    alone_share = alone_ns / (wall * len(alone)) if alone else None
    excess = None
    if steal_fraction:
        vals = []
        competitors = set(placement) if vcpu_threads is None else set(vcpu_threads)
        for group, frac in steal_fraction:
            n_threads = sum(1 for t, cl in placement.items() if t in competitors and set(cl) & set(group))
            fair = max(0.0, 1.0 - len(set(group)) / max(n_threads, 1))
            vals.append(frac - fair)
        excess = sum(vals) / len(vals)
    psi = None
    if before.psi_some_us is not None and after.psi_some_us is not None:
        psi = min((after.psi_some_us - before.psi_some_us) * 1e3 / wall, 1.0)
    freqs = [f for f in (_procfs.cpufreq_khz(c) for c in cpus) if f is not None]
    return Quality(
        wall_ns=wall,
        cpus=tuple(cpus),
        source=source,
        other_busy_ns=other,
        other_share=share,
        alone_run_delay_ns=alone_ns,
        alone_delay_share=alone_share,
        steal_excess=excess,
        psi_cpu_some_share=psi,
        freq_min_khz=min(freqs) if freqs else None,
        max_other_share=max_other_share,
        max_alone_delay_share=max_alone_delay_share,
        other_tasks_ns=tasks_ns,
    )


class measure_cpus:
    """Context manager: the [`Quality`][vcpulab.quality.Quality] of the code inside it, for
    threads started inside (register them with [`add_thread`][vcpulab.quality.measure_cpus.add_thread];
    with the thread that enters it they are the run's own in the censuses)::

        with measure_cpus([1]) as m:
            t = PinnedThread(...); t.start(); m.add_thread(t.tid, [1]) ...
        m.quality.line()
    """

    @renamed_since(PCPUS_RENAMED, _ONE_NAME, name="measure_cpus", cpus="pcpus")
    def __init__(self, pcpus: Iterable[int], **thresholds: Any) -> None:
        self.cpus = sorted(
            {check_int("pcpus entry", c, 0, 2**16) for c in check_seq("pcpus", pcpus, "host CPU numbers")}
        )
        for k, v in thresholds.items():
            if k not in _THRESHOLDS:
                raise TypeError(f"measure_cpus: unknown threshold {k!r}; it takes {', '.join(_THRESHOLDS)}")
            check_float(k, v, 0.0, 1.0, unit="(a fraction)")
        self.thresholds = thresholds
        self.placement: dict[int, list[int]] = {}
        self._first: dict[int, tuple[int, int]] = {}
        self._last: dict[int, tuple[int, int]] = {}
        self._runner = 0
        self._census: Census | None = None
        self.quality: Quality | None = None

    @renamed_since(PCPUS_RENAMED, _ONE_NAME, name="add_thread", cpus="pcpus")
    def add_thread(self, tid: int, pcpus: Sequence[int]) -> None:
        """Counts thread ``tid`` (of this process) as the run's own, pinned to
        ``pcpus``; its CPU time and run delay count from now."""
        self.placement[tid] = list(pcpus)
        try:
            c, d, _ = thread_schedstat(tid)
            self._first[tid] = (c, d)
        except OSError:
            pass

    def end_thread(self, tid: int) -> None:
        """Reads thread ``tid``'s counters now (call it from the thread just
        before it ends: an ended thread's schedstat is gone)."""
        c, d, _ = thread_schedstat(tid)
        c0, d0 = self._first.get(tid, (0, 0))
        self._last[tid] = (c - c0, d - d0)

    def __enter__(self) -> measure_cpus:
        # the thread that enters drives the measured code: the run's own
        self._runner = threading.get_native_id()
        self._census = census()
        self._before = snapshot(self.cpus)
        return self

    def __exit__(self, *exc: Any) -> None:
        after = snapshot(self.cpus, list(self.placement))
        census1 = census()
        before = Snapshot(
            self._before.t_ns, self._before.source, self._before.counters, self._before.psi_some_us, dict(self._first)
        )
        self.quality = quality(
            before,
            after,
            self.placement,
            own_cpu_ns={t: v[0] for t, v in self._last.items()},
            own_run_delay_ns={t: v[1] for t, v in self._last.items()},
            census=(self._census, census1),
            born=list(self.placement),
            run_tids=[self._runner],
            **self.thresholds,
        )
