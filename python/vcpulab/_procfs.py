"""One reader per host fact: the procfs and sysfs files vcpulab reads about
the machine it runs on (not about KVM: that is ``_core`` and ``kvm.py``).

* ``/proc/<pid>/task/<tid>/schedstat``: CPU time, run-queue delay (ns) and
  timeslices of a thread (Documentation/scheduler/sched-stats.rst);
* ``/proc/stat``: per-CPU busy time, in USER_HZ ticks, and the tasks
  created since boot (``processes``) (``man 5 proc``);
* ``/proc/self/status`` (``NSpid``) and ``/proc/self/mountinfo`` (the
  ``/proc`` mount's ``hidepid``): whether ``/proc`` shows every task;
* ``/sys/devices/system/cpu/cpuN/cpuidle/stateK/time``: idle residency, µs
  (Documentation/admin-guide/pm/cpuidle.rst);
* ``/proc/pressure/cpu``: CPU pressure stall time, µs (Documentation/accounting/psi.rst);
* ``/sys/devices/system/cpu/cpuN/cpufreq/scaling_cur_freq``: kHz;
* ``/sys/module/kvm*/parameters/*``: the kvm modules' parameters, typed
  (``module_param``, ``module_params``), which
  [`vcpulab.kvm.module_params`][] (all of them) and
  [`vcpulab.sim.halt_poll.host_params`][] (the halt-poll four) return.

Readers of optional facts return None where the file is absent or
unreadable; the schedstat readers raise OSError for a thread that has gone
(the caller knows whether that is an error)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple


class Schedstat(NamedTuple):
    """One thread's ``schedstat``: the three fields, in the kernel's order."""

    #: time on a CPU, ns
    cpu_ns: int
    #: time runnable but waiting on a run queue, ns
    run_delay_ns: int
    #: timeslices run on a CPU
    timeslices: int


def task_schedstat(tid: int, pid: int | None = None) -> Schedstat:
    """Thread ``tid`` of process ``pid`` (default: this process); OSError when
    it has gone, ValueError when the file is not three integers."""
    with open(f"/proc/{pid or 'self'}/task/{tid}/schedstat") as f:
        cpu, delay, slices = f.read().split()
    return Schedstat(int(cpu), int(delay), int(slices))


def every_task_schedstat(pid: int | None = None, skip_comm_suffix: str | None = None) -> dict[int, Schedstat]:
    """tid -> schedstat of every thread of process ``pid`` (default: every
    thread on the machine), leaving out threads whose ``comm`` ends with
    ``skip_comm_suffix`` (vcpulab's vCPU threads are named ``.../KVM``) and
    threads that go while it reads."""
    pids: Iterable[str] = [str(pid)] if pid is not None else (p for p in os.listdir("/proc") if p.isdigit())
    out: dict[int, Schedstat] = {}
    for p in pids:
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                if skip_comm_suffix is not None:
                    with open(f"/proc/{p}/task/{tid}/comm") as f:
                        if f.read().strip().endswith(skip_comm_suffix):
                            continue
                out[int(tid)] = task_schedstat(int(tid), int(p))
            except (OSError, ValueError):
                continue
    return out


def proc_stat_busy_ns(cpus: Iterable[int]) -> dict[int, int]:
    """Busy ns of each CPU in ``cpus`` from ``/proc/stat`` (all time but idle
    and iowait; 10 ms resolution at USER_HZ = 100); ValueError naming a CPU
    that /proc/stat does not list (offline or absent)."""
    want = {f"cpu{c}": c for c in cpus}
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[int, int] = {}
    with open("/proc/stat") as f:
        for line in f:
            name = line.split(" ", 1)[0]
            if name in want:
                v = [int(x) for x in line.split()[1:]]
                idle = v[3] + (v[4] if len(v) > 4 else 0)
                out[want[name]] = int((sum(v[:8]) - idle) * 1e9 / hz)
    missing = sorted(set(want.values()) - set(out))
    if missing:
        raise ValueError(f"cpus: host CPU(s) {missing} are not online (not in /proc/stat)")
    return out


def cpuidle_us(cpu: int) -> int | None:
    """Total idle residency of host CPU ``cpu`` over all its cpuidle states,
    µs; None where cpuidle is absent or a state cannot be read."""
    base = f"/sys/devices/system/cpu/cpu{cpu}/cpuidle"
    try:
        states = [s for s in os.listdir(base) if s.startswith("state")]
    except OSError:
        return None
    if not states:
        return None
    total = 0
    for s in states:
        try:
            with open(f"{base}/{s}/time") as f:
                total += int(f.read())
        except (OSError, ValueError):
            return None
    return total


def forks_total() -> int | None:
    """Tasks created since boot, every process and thread (``/proc/stat``'s
    ``processes`` line, the kernel's ``total_forks``); None without it."""
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("processes "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


@functools.cache
def proc_shows_every_task() -> bool:
    """Whether ``/proc`` lists every task of the machine: false in a child
    PID namespace (a container: ``NSpid`` in ``/proc/self/status`` names
    more than one pid, and tasks outside the namespace are not listed) and
    where ``/proc`` is mounted with ``hidepid`` other than 0 / ``off`` or
    with ``subset=pid`` (other users' processes hidden), or either file
    cannot be read. Read once per process (neither changes under a running
    program in practice; ``proc_shows_every_task.cache_clear()`` reads again)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("NSpid:") and len(line.split()) != 2:
                    return False
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4 and fields[4] == "/proc" and " - proc " in line:
                    opts = line.rsplit(" ", 1)[-1].strip().split(",")
                    for o in opts:
                        if o.startswith("hidepid=") and o not in ("hidepid=0", "hidepid=off"):
                            return False
                        if o == "subset=pid":
                            return False
    except OSError:
        return False
    return True


def psi_cpu_some_us() -> int | None:
    """Machine-wide ``some`` CPU pressure, cumulative µs; None without PSI."""
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some"):
                    return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpufreq_khz(cpu: int) -> int | None:
    """The current frequency of host CPU ``cpu``, kHz; None without cpufreq."""
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def module_param(path: str | os.PathLike[str]) -> bool | int | str:
    """One module parameter file, typed: ``Y``/``N`` a bool, a number an int,
    anything else the stripped string. Raises OSError where it cannot be read."""
    raw = Path(path).read_text().strip()
    if raw in ("Y", "N"):
        return raw == "Y"
    try:
        return int(raw)
    except ValueError:
        return raw


def module_params(sysfs: str | os.PathLike[str] = "/sys/module", prefix: str = "kvm") -> dict[str, dict[str, Any]]:
    """Every parameter of the modules ``prefix*`` under ``sysfs``, typed
    (``module_param``; None for a file that cannot be read), by module and
    name, in name order."""
    out: dict[str, dict[str, Any]] = {}
    for mod in sorted(Path(sysfs).glob(f"{prefix}*")):
        pdir = mod / "parameters"
        if not pdir.is_dir():
            continue
        params: dict[str, Any] = {}
        for f in sorted(pdir.iterdir()):
            try:
                params[f.name] = module_param(f)
            except OSError:
                params[f.name] = None
        out[mod.name] = params
    return out
