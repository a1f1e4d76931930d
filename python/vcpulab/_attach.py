"""Watching VMs that vcpulab did not start: [`attach`][vcpulab.kvm.attach] (exported as
``vcpulab.kvm.attach``) and the ``vcpulab watch PID`` command.

A VMM process (QEMU, Firecracker, cloud-hypervisor, another vcpulab) holds its
VMs and vCPUs as file descriptors (``/proc/<pid>/fd`` → ``anon_inode:kvm-vm``,
``anon_inode:kvm-vcpu:N``). Its vCPU threads are found two ways:

* KVM's debugfs (``/sys/kernel/debug/kvm/<pid>-<vm fd>/vcpuN/pid``): the thread
  that last ran vCPU N (set by ``KVM_RUN``; Documentation/virt/kvm/api.rst,
  virt/kvm/kvm_main.c ``kvm_vcpu_ioctl``); debugfs is mounted when missing and
  this process may (root; by ``mount(2)``, and it stays mounted: ``vcpulab._mounts``);
* thread names: QEMU names its vCPU threads ``CPU n/KVM``; vcpulab's
  experiment threads carry the same names.

[`Attached.sample`][vcpulab.kvm.Attached.sample] reads, per vCPU thread, ``/proc/<pid>/task/<tid>/schedstat``
(CPU time, run delay, timeslices) and ``status`` (context switches), and per VM
the debugfs statistics (sums over the VM's vCPUs: ``exits``, ``halt_exits``,
``halt_successful_poll``, …), into polars frames whose columns are named like
``Run.threads`` and ``Run.samples``; and, where the process holds binary-stats
fds (``anon_inode:kvm-vcpu-stats:N``: vcpulab always, QEMU after a QMP
``query-stats``), each vCPU's KVM statistics (``exits``, ``halt_exits``,
``halt_successful_poll``, …, as in ``Run.samples``). KVM refuses vCPU ioctls
from another process, so no stats fd can be made for a VMM that holds none;
debugfs statistics are used where the kernel lets them be read (this host
answers EPERM).

How the stats fds are held: [`attach`][vcpulab.kvm.attach] opens a pidfd for the process
(``pidfd_open(2)``; it names that process even if its pid is reused), duplicates
each stats fd **once** (``pidfd_getfd(2)``, needs ptrace access, e.g. root) and
checks that the duplicate is a KVM stats file (an anonymous inode named
``kvm-vcpu-stats:N`` with KVM's id in its header; anything else is refused).
Samples ``pread`` those kept duplicates; the process's fd numbers are never
looked up again, so a number it reuses for an ordinary file is never read as
statistics. A kept fd also keeps the VM's kernel state alive (KVM holds a VM
reference per stats file), so once the process closes its own stats fd
(``kcmp(2)`` tells) or exits, the duplicate is closed and that vCPU's KVM
statistics end ([`Attached.notes`][vcpulab.kvm.Attached.notes] says so). [`Attached.close`][vcpulab.kvm.Attached.close] (or
``with attach(pid) as a:``) releases everything; garbage collection does too.

[`Attached.trace`][vcpulab.kvm.Attached.trace] records the scheduler and KVM tracepoints on the CPUs
the vCPU threads may run on, KVM events filtered to the process, into the
frames of a traced ``Run`` (``trace``, ``wakeups``, ``exits``, ``halts``;
docs/tracing.md).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # polars is imported where a frame is made: `import vcpulab.kvm` stays light
    import polars as pl

from vcpulab import _procfs
from vcpulab._checks import PCPUS_RENAMED, check_float, check_int, check_seq, renamed_since

__all__ = ["Attached", "attach"]

DEBUGFS_KVM = Path("/sys/kernel/debug/kvm")
_CPU_NAME = re.compile(r"^CPU (\d+)/KVM$")
_VCPU_FD = re.compile(r"^anon_inode:kvm-vcpu:(\d+)$")
_VCPU_STATS_FD = re.compile(r"^anon_inode:kvm-vcpu-stats:(\d+)$")


def _debugfs_kvm() -> Path | None:
    """/sys/kernel/debug/kvm, mounting debugfs first when it is missing and
    this process is root (by mount(2); it stays mounted: vcpulab._mounts)."""
    from vcpulab._mounts import ensure_mounted

    if DEBUGFS_KVM.is_dir():
        return DEBUGFS_KVM
    try:
        ensure_mounted("debugfs")
    except OSError:
        return None
    return DEBUGFS_KVM if DEBUGFS_KVM.is_dir() else None


def _online_cpus() -> set[int]:
    """The online host CPUs (/sys/devices/system/cpu/online, e.g. "0-3,6"); empty where unreadable."""
    try:
        text = Path("/sys/devices/system/cpu/online").read_text().strip()
        out: set[int] = set()
        for part in filter(None, text.split(",")):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
        return out
    except (OSError, ValueError):
        return set()


def _read_int(p: Path) -> int | None:
    try:
        return int(p.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Attached:
    """A VMM process's VMs and vCPU threads (see [`attach`][vcpulab.kvm.attach])."""

    pid: int
    comm: str
    #: one row per VM: vm (its fd in the process), debugfs (the folder, or null)
    vms: pl.DataFrame
    #: one row per vCPU: vm, vcpu, tid (0 where unknown), name, source ("debugfs" or "thread name")
    vcpus: pl.DataFrame
    #: why statistics are missing, if they are (and since when)
    notes: list[str] = field(default_factory=list)
    #: vCPU index → the number of the binary-stats fd (KVM_GET_STATS_FD) the
    #: process held for it at attach time; information only: samples read the
    #: duplicates taken then (module docstring), never these numbers again
    stats_fds: dict[int, int] = field(default_factory=dict)
    #: the pidfd (``_core.ForeignProcess``); None after [`close`][vcpulab.kvm.Attached.close]
    _process: Any = field(default=None, repr=False, compare=False)
    #: vCPU index → its kept stats fd (``_core.ForeignStats``)
    _kept: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)

    def _live(self) -> Any:
        if self._process is None:
            raise ValueError(f"Attached(pid={self.pid}) is closed")
        return self._process

    def _drop_stats(self, vcpu: int, why: str) -> None:
        s = self._kept.pop(vcpu, None)
        if s is not None:
            s.close()
            self.notes.append(
                f"vCPU {vcpu}: {why}: no KVM statistics for it from here on (its kept stats fd is closed)"
            )

    def _vcpu_stats(self, vcpu: int) -> dict[str, int]:
        from vcpulab import _core

        s = self._kept.get(vcpu)
        if s is None:
            return {}
        if s.held() is False:  # None: kcmp unavailable, keep reading the kept file
            self._drop_stats(vcpu, f"the process closed its stats fd {s.target_fd} (its VM was closed)")
            return {}
        try:
            d = s.read()
        except (OSError, _core.KvmIoctlError):
            return {}
        return {k: int(v) for k, v in d.items() if isinstance(v, int)}

    def exited(self) -> bool:
        """True once the process has exited (by its pidfd: a new process with
        the same pid does not count). ValueError after [`close`][vcpulab.kvm.Attached.close]."""
        return bool(self._live().wait_exited(0.0))

    def wait_exited(self, timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` seconds (0 to 86400) for the process to
        exit; True when it has. Ctrl-C raises KeyboardInterrupt within 50 ms."""
        check_float("timeout_s", timeout_s, 0.0, 86_400.0)
        return bool(self._live().wait_exited(float(timeout_s)))

    def close(self) -> None:
        """Closes the kept stats fds and the pidfd (idempotent); sampling
        afterwards raises ValueError."""
        for s in self._kept.values():
            s.close()
        self._kept.clear()
        if self._process is not None:
            self._process.close()
            self._process = None

    def __enter__(self) -> Attached:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _thread_row(self, tid: int) -> dict[str, int] | None:
        base = Path(f"/proc/{self.pid}/task/{tid}")
        try:
            cpu, delay, slices = _procfs.task_schedstat(tid, self.pid)
            st = (base / "status").read_text()
        except (OSError, ValueError):
            return None
        vol = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", st, re.M).group(1))  # type: ignore[union-attr]
        nonvol = int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", st, re.M).group(1))  # type: ignore[union-attr]
        return {
            "cpu_ns": cpu,
            "run_delay_ns": delay,
            "timeslices": slices,
            "voluntary_ctxt_switches": vol,
            "nonvoluntary_ctxt_switches": nonvol,
        }

    def sample_once(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """One sample now: (per vCPU thread, per VM) frames, each with ``t_ns``
        (CLOCK_MONOTONIC). Once the process has exited both are empty.
        ValueError after [`close`][vcpulab.kvm.Attached.close]."""
        import polars as pl

        gone = bool(self._live().wait_exited(0.0))  # a zombie too: its /proc entries stay until reaped
        if gone:
            for vcpu in list(self._kept):
                self._drop_stats(vcpu, "the process exited")
        t = time.monotonic_ns()
        rows = []
        for r in self.vcpus.iter_rows(named=True) if not gone else ():
            tr = self._thread_row(r["tid"]) if r["tid"] else None
            if tr is not None:
                rows.append(
                    {"t_ns": t, "vm": r["vm"], "vcpu": r["vcpu"], "tid": r["tid"], **tr, **self._vcpu_stats(r["vcpu"])}
                )
        vm_rows = []
        for r in self.vms.iter_rows(named=True) if not gone else ():
            if not r["debugfs"]:
                continue
            d = Path(r["debugfs"])
            stats: dict[str, Any] = {"t_ns": t, "vm": r["vm"]}
            try:
                names = sorted(p.name for p in d.iterdir() if p.is_file())
            except OSError:
                continue
            for name in names:
                v = _read_int(d / name)
                if v is not None:
                    stats[name] = v
            vm_rows.append(stats)
        schema = {
            "t_ns": pl.Int64,
            "vm": pl.Int64,
            "vcpu": pl.Int64,
            "tid": pl.Int64,
            "cpu_ns": pl.Int64,
            "run_delay_ns": pl.Int64,
            "timeslices": pl.Int64,
            "voluntary_ctxt_switches": pl.Int64,
            "nonvoluntary_ctxt_switches": pl.Int64,
        }
        extra = sorted({k for r in rows for k in r} - set(schema))
        schema.update({k: pl.Int64 for k in extra})
        return pl.DataFrame(rows, schema=schema), pl.DataFrame(vm_rows)

    def sample(self, duration_s: float = 1.0, every_s: float = 0.1) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Samples every ``every_s`` for ``duration_s`` (both s, > 0): (threads,
        vm_stats) frames with ``t_ns`` relative to the first sample. Threads
        that ended in between are missing from the later samples."""
        import polars as pl

        duration_s = check_float("duration_s", duration_s, 0.0, 86_400.0, lo_open=True, unit="s")
        every_s = check_float("every_s", every_s, 0.0, 86_400.0, lo_open=True, unit="s")
        t0 = time.monotonic()
        th, vm = [], []
        while True:
            a, b = self.sample_once()
            th.append(a)
            vm.append(b)
            if time.monotonic() - t0 >= duration_s:
                break
            time.sleep(min(every_s, max(0.0, duration_s - (time.monotonic() - t0))))
        threads = pl.concat(th)
        vms = pl.concat(vm, how="diagonal_relaxed") if any(x.height for x in vm) else pl.DataFrame()
        first = int(threads["t_ns"].min()) if threads.height else 0  # type: ignore[arg-type]
        threads = threads.with_columns(pl.col("t_ns") - first)
        if vms.height:
            vms = vms.with_columns(pl.col("t_ns") - first)
        return threads, vms

    @renamed_since(PCPUS_RENAMED, "one name for host CPU lists everywhere", name="trace", cpus="pcpus")
    def trace(self, duration_s: float = 1.0, pcpus: list[int] | None = None, max_events: int | None = None) -> Any:
        """Traces the process's vCPU threads for ``duration_s`` seconds
        (docs/tracing.md): a [`vcpulab.tracing.TraceFrames`][] whose
        ``trace``, ``wakeups``, ``exits`` and ``halts`` are the frames of a
        traced ``Run`` (``vm`` is the VM's fd in the process, as in
        [`vcpus`][vcpulab.kvm.Attached.vcpus]; ns from the start of the window; ``info["window_ns"]``
        is the window's length). ``pcpus``: the host
        CPUs whose scheduler events are recorded (default: every CPU the vCPU
        threads may run on; ``cpus=`` before 2026-12-01, still accepted with a
        DeprecationWarning). KVM events are kept only for this process.
        Ctrl-C stops it (the trace is freed)."""
        from vcpulab import tracing

        duration_s = check_float("duration_s", duration_s, 1e-3, 3600.0, unit="s")
        if pcpus is not None:  # checked here, before the vCPU threads are looked for (Trace checks them again)
            pcpus = [
                check_int("pcpus entry", c, 0, 2**16) for c in check_seq("pcpus", pcpus, "host CPU numbers", min_len=1)
            ]
            online = _online_cpus()
            offline = sorted(set(pcpus) - online) if online else []
            if offline:
                raise ValueError(f"pcpus: host CPU(s) {offline} are not online (online: {sorted(online)})")
        if max_events is not None:
            max_events = check_int("max_events", max_events, 1, 1 << 32)
        known = [r for r in self.vcpus.iter_rows(named=True) if r["tid"]]
        if not known:
            raise LookupError(f"process {self.pid}: no vCPU thread identified to trace ({'; '.join(self.notes)})")
        cpus = pcpus
        if cpus is None:
            allowed: set[int] = set()
            for r in known:
                try:
                    allowed |= os.sched_getaffinity(r["tid"])
                except OSError:
                    pass
            cpus = sorted(allowed) or sorted(os.sched_getaffinity(0))
        limit = tracing.DEFAULT_MAX_EVENTS if max_events is None else max_events
        with tracing.Trace(cpus, max_events=limit, kvm_pid=self.pid) as tr:
            t0 = time.monotonic_ns()
            end = t0 + int(duration_s * 1e9)
            while (left := end - time.monotonic_ns()) > 0:
                time.sleep(min(left / 1e9, 0.05))
            tf = tr.frames(t0, end, [(r["tid"], r["vm"], r["vcpu"]) for r in known])
            tf.info["window_ns"] = end - t0  # as a traced Run's trace_info: the window the frames cover
            return tf

    def __repr__(self) -> str:
        return f"<Attached pid={self.pid} {self.comm!r} vms={self.vms.height} vcpus={self.vcpus.height}>"


def attach(pid: int) -> Attached:
    """Finds process ``pid``'s KVM VMs and vCPU threads (module docstring).

    Raises ``ValueError`` for a bad pid, ``ProcessLookupError`` when no such
    process exists, ``PermissionError`` when its file descriptors cannot be
    read, and ``LookupError`` when it holds no KVM VM.
    """
    pid = check_int("pid", pid, 1, 2**31 - 1)  # any integer type (numpy's too); pid_t is 32 bits
    proc = Path(f"/proc/{pid}")
    if not proc.is_dir():
        raise ProcessLookupError(f"no process {pid}")
    from vcpulab import _core

    # the pidfd first: if the process still runs after its /proc entries were read
    # (checked below), they were this process's, not a later one's with the same pid
    try:
        process = _core.ForeignProcess(pid)
    except ProcessLookupError:
        raise ProcessLookupError(f"no process {pid}") from None
    kept: dict[int, Any] = {}
    try:
        return _attach(pid, proc, process, kept)
    except BaseException:
        for s in kept.values():
            s.close()
        process.close()
        raise


def _attach(pid: int, proc: Path, process: Any, kept: dict[int, Any]) -> Attached:
    import polars as pl

    try:
        comm = (proc / "comm").read_text().strip()
    except FileNotFoundError:
        raise ProcessLookupError(f"no process {pid}") from None
    vm_fds: list[int] = []
    vcpu_fds: dict[int, int] = {}
    stats_fds: dict[int, int] = {}
    for fd in os.listdir(proc / "fd"):  # PermissionError names the path
        try:
            target = os.readlink(proc / "fd" / fd)
        except OSError:
            continue
        if target == "anon_inode:kvm-vm":
            vm_fds.append(int(fd))
        elif m := _VCPU_FD.match(target):
            vcpu_fds[int(m.group(1))] = int(fd)
        elif m := _VCPU_STATS_FD.match(target):
            stats_fds[int(m.group(1))] = int(fd)
    if not vm_fds:
        raise LookupError(f"process {pid} ({comm}) holds no KVM VM (no anon_inode:kvm-vm among its file descriptors)")
    notes: list[str] = []
    dbg = _debugfs_kvm()
    if dbg is None:
        notes.append(
            "KVM debugfs is not available (mount -t debugfs nodev /sys/kernel/debug as root): no VM statistics"
        )
    vm_rows, vcpu_rows = [], []
    for vm_fd in sorted(vm_fds):
        d = dbg / f"{pid}-{vm_fd}" if dbg is not None else None
        vm_rows.append({"vm": vm_fd, "debugfs": str(d) if d is not None and d.is_dir() else None})
        if d is not None and d.is_dir():
            for v in sorted(d.glob("vcpu*")):
                n = int(v.name[4:])
                tid = _read_int(v / "pid") or 0
                name = ""
                if tid:
                    try:
                        name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                    except OSError:
                        name = ""
                vcpu_rows.append({"vm": vm_fd, "vcpu": n, "tid": tid, "name": name, "source": "debugfs"})
    if not vcpu_rows:
        # no debugfs: vCPU threads by their names (QEMU's and vcpulab's "CPU n/KVM")
        for tid in sorted(int(t) for t in os.listdir(proc / "task")):
            try:
                name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            except OSError:
                continue
            if m := _CPU_NAME.match(name):
                vm = sorted(vm_fds)[0] if len(vm_fds) == 1 else -1
                vcpu_rows.append({"vm": vm, "vcpu": int(m.group(1)), "tid": tid, "name": name, "source": "thread name"})
    if not vcpu_rows:
        # known vCPUs (their fds), threads unknown
        notes.append("vCPU threads not identified (no debugfs, no thread named 'CPU n/KVM')")
        vm = sorted(vm_fds)[0] if len(vm_fds) == 1 else -1
        vcpu_rows = [{"vm": vm, "vcpu": n, "tid": 0, "name": "", "source": "fd"} for n in sorted(vcpu_fds)]
    vcpus = pl.DataFrame(
        vcpu_rows, schema={"vm": pl.Int64, "vcpu": pl.Int64, "tid": pl.Int64, "name": pl.String, "source": pl.String}
    )
    for n, num in sorted(stats_fds.items()):
        try:
            sf = process.take_stats_fd(num)
        except ValueError as e:  # the process closed and reused the number since it was listed
            notes.append(f"vCPU {n}: stats fd skipped ({e})")
            continue
        except OSError as e:
            notes.append(f"vCPU {n}: its stats fd {num} cannot be duplicated ({e}): no KVM statistics for it")
            continue
        if sf.vcpu != n:
            sf.close()
            notes.append(f"vCPU {n}: fd {num} now holds vCPU {sf.vcpu}'s stats: skipped")
            continue
        kept[n] = sf
    if process.wait_exited(0.0):
        raise ProcessLookupError(f"process {pid} ({comm}) exited while being attached")
    if not stats_fds:
        notes.append("the process holds no vCPU stats fd (KVM_GET_STATS_FD): no per-vCPU KVM statistics")
    if len(vm_fds) > 1 and stats_fds:
        notes.append("several VMs: vCPU stats fds are matched to vCPUs by index only")
    for r in vm_rows:
        if r["debugfs"] and _read_int(Path(str(r["debugfs"])) / "exits") is None:
            notes.append(f"KVM debugfs statistics in {r['debugfs']} are not readable here (the kernel refuses them)")
    return Attached(
        pid=pid,
        comm=comm,
        vms=pl.DataFrame(vm_rows, schema={"vm": pl.Int64, "debugfs": pl.String}),
        vcpus=vcpus,
        notes=notes,
        stats_fds=stats_fds,
        _process=process,
        _kept=kept,
    )
