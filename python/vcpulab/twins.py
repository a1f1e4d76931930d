"""Twins: every real-KVM experiment has a simulated twin, calibrated on this host.

A real experiment ([`vcpulab.experiment.run`][]: a guest program on N vCPUs
pinned to host CPUs) and its *twin* (a [`vcpulab.sim.Config`][] of the same
experiment) are run side by side and compared metric by metric::

    from vcpulab import twins
    from vcpulab.experiment import SpinLock

    cal = twins.calibrate()                        # ~1 s of real KVM, cached per process
    exp = twins.Experiment(SpinLock(kind="ticket", hold=50, think=50), vcpus=3, pcpus=(0,))
    cfg = twins.twin(exp, cal)                     # the simulated configuration
    cmp = twins.compare(exp, trials=3, seeds=3)    # polars: metric, real ± CI, sim ± CI, rel_err

**What the twin is built from** (no per-cell factor anywhere):

* the host: its CPUs (one simulated CPU per distinct host CPU of the
  placement), the pinning (one CPU list shared by every vCPU → unpinned within
  those CPUs; one CPU each → pinned), the running kernel's scheduler knobs
  ([`host_knobs`][vcpulab.twins.host_knobs]: EEVDF base slice from debugfs, the tick from CONFIG_HZ),
  the KVM module's halt-poll parameters (or the run's per-VM maximum);
* the guest program as phases: the loops of ``src/kvm/guest/program.rs``
  counted in emulated instructions ([`guest_path`][vcpulab.twins.guest_path]) and turned into ns
  through the cost per emulated instruction *measured here*
  ([`calibrate`][vcpulab.twins.calibrate]: this host emulates every guest instruction, see
  ``docs/twins.md``);
* costs from [`calibrate`][vcpulab.twins.calibrate]: instruction costs, the HLT exit, wake-up
  latency from a blocked halt and from the poll loop (the last two only slot
  into a simulator that models wake-up latency: ``Host.wakeup_ipi_ns`` where
  the host model has it; otherwise the comparison says the mechanism is
  missing);
* the host load each real run measured ([`OtherLoad`][vcpulab.twins.OtherLoad]): other tasks'
  short bursts as host noise, CPU-bound ones as a background task, and the
  experiment's own VMM loop as the simulated VMM thread ([`host_load_for`][vcpulab.twins.host_load_for]).

**What is compared** ([`compare`][vcpulab.twins.compare], [`METRICS`][vcpulab.twins.METRICS]): lock acquisitions per
second, mean wait per acquisition (the real guest times it with RDTSC and
records mean and max only, so percentiles are simulated-only), steal fraction,
context switches per vCPU and second, halt exits and successful polls per
second, MSI round trip, timer ticks per second; the per-10 ms steal
distribution with a two-sample Kolmogorov-Smirnov distance for workloads whose
vCPUs are always runnable. Real values carry a 95 % t-interval over trials,
simulated ones over seeds. [`distributions`][vcpulab.twins.distributions] compares run-slice and
wake-up-latency distributions (KS statistic and p-value) of a real trace in
the tracing schema ([`TRACE_COLUMNS`][vcpulab.twins.TRACE_COLUMNS], [`WAKEUP_COLUMNS`][vcpulab.twins.WAKEUP_COLUMNS]) with twins. ``IpiPingPong``'s twin is an initiator thread beside a
responder (``sim.Workload.thread0_phases``) with the measured IPI wake-up.
"""

from __future__ import annotations

import gzip
import math
import numbers
import os
import platform
import re
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, overload

import numpy as np
import polars as pl

from vcpulab import _procfs, sim, tracing
from vcpulab._checks import PCPUS_RENAMED, check_bool, check_float, check_int, check_seq, check_type, renamed_since
from vcpulab._interrupt import keep_partial, partial_of
from vcpulab.analysis import t_interval
from vcpulab.experiment import IdleTicks, IpiPingPong, MsiPingPong, PvSpinLock, Run, Spin, SpinLock, Workload
from vcpulab.sim import halt_poll as _hp

#: why ``cpus=`` became ``pcpus=`` (the DeprecationWarnings say it)
_ONE_NAME = "one name for host CPU lists everywhere"

__all__ = [
    "COST_REPEATS",
    "Calibration",
    "DIRECTION_METRICS",
    "Experiment",
    "FACTORS",
    "FLOORS",
    "Grid",
    "IPI_OUTSIDE_INSNS",
    "METRICS",
    "MSI_DEADLINE_S",
    "OtherLoad",
    "PV_SPIN_ITER_INSNS",
    "SPIN_PHASE_DIST",
    "TRACE_COLUMNS",
    "TWIN_MAX_MACHINE_CPUS",
    "Value",
    "WAKEUP_COLUMNS",
    "background_for",
    "calibrate",
    "cell_factors",
    "cell_name",
    "compare",
    "default_grid",
    "policy_grid",
    "directions",
    "distributions",
    "grid",
    "guest_path",
    "host_knobs",
    "host_load_for",
    "ks_distance",
    "real_metrics",
    "real_steal_intervals",
    "run_real",
    "run_sim",
    "sim_metrics",
    "sim_steal_intervals",
    "sim_trace_frames",
    "sim_wakeups",
    "start_gap_of",
    "twin",
    "twin_machine_cpus",
    "vcpu_slices",
]


# ------------------------------------------------------------------ measured values


@dataclass(frozen=True)
class Value:
    """One measured (or read) value: the number, its unit, and how it was obtained."""

    value: float
    unit: str
    how: str

    def __float__(self) -> float:
        return float(self.value)


@dataclass(frozen=True)
class Calibration:
    """What [`calibrate`][vcpulab.twins.calibrate] measured on this host (every entry a [`Value`][vcpulab.twins.Value]).

    Keys: ``path_insn_ns`` (ns per emulated instruction of the programs' fixed
    paths: loads, stores, RDTSC, XCHG, branches), ``loop_insn_ns`` (ns per
    instruction of a ``dec; jnz`` delay loop), ``insns_per_acq_measured`` /
    ``insns_per_acq_counted`` (the check of [`guest_path`][vcpulab.twins.guest_path]'s count),
    ``msi_round_insns`` (emulated instructions per MSI round), ``wake_block_ns``
    (MSI sent → vCPU running again after a blocked halt, minus the guest's
    instructions), ``wake_poll_ns`` (the same when the halt-poll loop caught
    the wake-up), ``tsc_khz``, and the host knobs of [`host_knobs`][vcpulab.twins.host_knobs].
    """

    values: dict[str, Value]
    cpu: int

    def __getitem__(self, key: str) -> float:
        return float(self.values[key].value)

    def frame(self) -> pl.DataFrame:
        """One row per value: name, value, unit, how."""
        return pl.DataFrame(
            {
                "name": list(self.values),
                "value": [float(v.value) for v in self.values.values()],
                "unit": [v.unit for v in self.values.values()],
                "how": [v.how for v in self.values.values()],
            }
        )


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _read_why(path: str) -> tuple[str | None, str]:
    try:
        with open(path) as f:
            return f.read().strip(), ""
    except OSError as e:
        return None, f"unreadable ({e.strerror})"


def _mount_debugfs() -> bool:
    """Mount debugfs at /sys/kernel/debug when it is not (root only, by mount(2);
    it stays mounted and vcpulab says so once: vcpulab._mounts); True if mounted."""
    from vcpulab._mounts import ensure_mounted

    if os.path.isdir("/sys/kernel/debug/sched"):
        return True
    try:
        ensure_mounted("debugfs")
    except OSError:
        return False
    return os.path.isdir("/sys/kernel/debug/sched")


def _kernel_config() -> dict[str, str]:
    text = None
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            text = f.read()
    except OSError:
        text = _read(f"/boot/config-{platform.release()}")
    out: dict[str, str] = {}
    for ln in (text or "").splitlines():
        m = re.match(r"^(CONFIG_[A-Z0-9_]+)=(.*)$", ln)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def host_knobs() -> dict[str, Value]:
    """The running kernel's scheduler and halt-poll knobs, each with where it was read.

    * ``base_slice_ns``: EEVDF's ``sysctl_sched_base_slice`` from
      ``/sys/kernel/debug/sched/base_slice_ns`` (debugfs is mounted when it is
      not and this process is root; it stays mounted, see ``vcpulab._mounts``); where unreadable, the kernel's rule
      0.75 ms × (1 + ilog2(min(ncpus, 8))) (``update_sysctl``,
      kernel/sched/fair.c) with ``how`` saying so.
    * ``tick_ns``: 1e9 / CONFIG_HZ (``/proc/config.gz`` or /boot/config-*).
    * ``preempt``: the preemption model (debugfs ``sched/preempt``), as text in ``how``.
    * ``halt_poll_ns``, ``halt_poll_ns_grow``, ``halt_poll_ns_grow_start``,
      ``halt_poll_ns_shrink``: ``/sys/module/kvm/parameters``.
    * ``machine_cpus``: the CPUs this process may run on
      (``sched_getaffinity``): the run's vCPUs use some of them, its VMM
      thread and the host's other tasks may use them all.
    """
    out: dict[str, Value] = {}
    ncpu = os.cpu_count() or 1
    mounted = _mount_debugfs()
    bs, why = _read_why("/sys/kernel/debug/sched/base_slice_ns") if mounted else (None, "debugfs not mounted")
    if bs is not None and bs.isdigit():
        out["base_slice_ns"] = Value(int(bs), "ns", "read /sys/kernel/debug/sched/base_slice_ns")
    else:
        v = 750_000 * (1 + int(math.log2(min(ncpu, 8))))
        out["base_slice_ns"] = Value(
            v,
            "ns",
            f"/sys/kernel/debug/sched/base_slice_ns: {why}; kernel rule 0.75 ms x (1 + ilog2(min({ncpu}, 8))) "
            "(update_sysctl, SCHED_TUNABLESCALING_LOG default)",
        )
    cfg = _kernel_config()
    hz = cfg.get("CONFIG_HZ")
    if hz and hz.isdigit():
        out["tick_ns"] = Value(1_000_000_000 // int(hz), "ns", f"1e9 / CONFIG_HZ={hz} from the kernel config")
    else:
        out["tick_ns"] = Value(4_000_000, "ns", "kernel config unreadable; Kconfig default HZ=250")
    pre, why = _read_why("/sys/kernel/debug/sched/preempt") if mounted else (None, "debugfs not mounted")
    model = pre or "; ".join(
        f"{k}={cfg[k]}"
        for k in ("CONFIG_PREEMPT_NONE", "CONFIG_PREEMPT_VOLUNTARY", "CONFIG_PREEMPT", "CONFIG_PREEMPT_DYNAMIC")
        if k in cfg
    )
    out["preempt"] = Value(
        float("nan"), "", f"preemption model: {model} ({'debugfs sched/preempt' if pre else why + '; kernel config'})"
    )
    for name, v in _hp.host_params().items():  # the host's, or the kernel default where unreadable
        unit = "ns" if name.endswith(("_ns", "start")) else ""
        out[name] = Value(v, unit, _hp.host_params.sources[name])  # type: ignore[attr-defined]
    out["machine_cpus"] = Value(len(os.sched_getaffinity(0)), "", "CPUs this process may run on (sched_getaffinity)")
    return out


# ------------------------------------------------------------- guest programs counted


def guest_path(workload: Workload, vcpus: int, pv_exits: bool = False) -> dict[str, int]:
    """Emulated guest instructions of one iteration of ``workload``'s program
    (``src/kvm/guest/program.rs``), split as the twin needs them.

    SpinLock (ticket, TAS) with ``iterations = 0``, uncontended (a
    ``delay(n)`` loop is ``mov; n × (dec; jnz)``, nothing when n = 0):

    * ``hold_loop`` = 2·hold + 1, ``hold_path`` = 15: from the acquiring
      instruction's result to the release: the branch to ``got`` (2), RDTSC
      and the wait accounting (7), the holder store (1), the critical
      section's load, increment, store and acquisition count (4), the release (1);
    * ``think_loop`` = 2·think + 1, ``think_path`` = 9: ``jmp top``, the
      stop-flag check (2), RDTSC (4), the acquire's ``mov``/``xchg`` (TAS) or
      ``mov``/``lock xadd`` (ticket) (2); ``iterations > 0`` adds 3
      (``mov; cmp; jae``);
    * ``wait_path`` = 8: instructions between the two RDTSCs of the timed wait
      when the lock is free (so the real mean wait is never below 8
      instructions; the simulated wait gets them added).

    PvSpinLock adds the ``check_every`` counter set-up (1) to the think path,
    the releasing ``xor; xchg`` (1) to the hold path, and the unlocker's scan
    of every vCPU's waiting flag (1 + 7 per vCPU, after the release) to the
    think path. ``pv_exits`` (a run under vcpulab's scheduler) adds the reset
    of the wait's failed-iteration count (1) to the wait path (a failed
    iteration then costs [`PV_SPIN_ITER_INSNS`][vcpulab.twins.PV_SPIN_ITER_INSNS]). MsiPingPong / IdleTicks: the round's instructions are measured
    by the calibration from KVM's ``insn_emulation`` stat (the interrupt stub
    and EOI dominate them), not counted here. Checked against
    ``insn_emulation`` by [`calibrate`][vcpulab.twins.calibrate] (``insns_per_acq_measured`` vs
    ``insns_per_acq_counted``) and by tests/test_twins.py.
    """
    if isinstance(workload, SpinLock):
        pv = isinstance(workload, PvSpinLock)
        return {
            "hold_loop": 2 * workload.hold + 1 if workload.hold > 0 else 0,
            "hold_path": 15 + (1 if pv else 0),
            "think_loop": 2 * workload.think + 1 if workload.think > 0 else 0,
            "think_path": 9 + (3 if workload.iterations > 0 else 0) + ((2 + 7 * vcpus) if pv else 0),
            "wait_path": 8 + (1 if pv_exits else 0),
        }
    raise ValueError(f"guest_path counts SpinLock / PvSpinLock programs; {type(workload).__name__} is measured instead")


def _iteration_insns(workload: SpinLock, vcpus: int) -> int:
    p = guest_path(workload, vcpus)
    return p["hold_loop"] + p["hold_path"] + p["think_loop"] + p["think_path"]


# --------------------------------------------------------------------- calibration

_CACHE: dict[int, Calibration] = {}
_LOCK = threading.Lock()


def _stat_delta(run: Run, name: str) -> int:
    s = run.samples
    if name not in s.columns:
        return 0
    g = s.group_by(["vm", "vcpu"]).agg((pl.col(name).max() - pl.col(name).min()).alias("d"))
    return int(g["d"].sum())


def calibrate(cpu: int | None = None, *, refresh: bool = False) -> Calibration:
    """Measure this host's costs on host CPU ``cpu`` (default: the last one this
    process may use), about 2 s of real KVM; cached per process (``refresh``
    measures again).

    1. Instruction costs: a 1-vCPU TAS ``SpinLock`` with a short (hold = think
       = 5) and a long (400) loop, a fixed number of iterations each, five
       such pairs ([`COST_REPEATS`][vcpulab.twins.COST_REPEATS]): the median path cost (and that
       pair's runs), the median loop cost (the cost of an emulated
       instruction drifts from one second to the next here). Each
       run's vCPU thread CPU time is ``path_insn_ns`` × its fixed-path
       instructions + ``loop_insn_ns`` × its loop instructions (counts from
       [`guest_path`][vcpulab.twins.guest_path], totals from KVM's ``insn_emulation`` stat); the two
       runs give both costs. CPU time, not wall time, so another task on the
       CPU does not inflate it.
    3. IPI delivery: `_calibrate_ipi` (``ipi_wake_ns``, ``ipi_round_insns``).
    2. Wake-up latencies: ``MsiPingPong`` on ``cpu`` (the host driver on the
       other CPU), 300 rounds 200 µs apart with halt polling off (every halt
       blocks) and 300 rounds 20 µs apart with a 200 µs maximum (polls catch
       them): median round trip minus the guest's instructions per round
       (``insn_emulation`` / rounds × ``path_insn_ns``).
    """
    from vcpulab import _core
    from vcpulab.experiment import run

    check_bool("refresh", refresh)
    allowed = sorted(_core.allowed_cpus())
    if cpu is None:
        cpu = allowed[-1]
    cpu = check_int("cpu", cpu, 0, 2**16)
    if cpu not in allowed:
        raise ValueError(f"host CPU {cpu} is not usable; this process may run on {allowed}")
    with _LOCK:
        if cpu in _CACHE and not refresh:
            return _CACHE[cpu]
        vals: dict[str, Value] = dict(host_knobs())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the cost per emulated instruction drifts between runs a second
            # apart (685-948 ns per path instruction in four back-to-back
            # calibrations here): the median of COST_REPEATS pairs
            pairs = []
            for _ in range(COST_REPEATS):
                rows = []
                for loop, iters in ((5, 3000), (400, 150)):
                    w = SpinLock(kind="tas", hold=loop, think=loop, iterations=iters)
                    r = run(w, vcpus=1, pcpus=[cpu], duration_s=10.0, sample_every_s=None)
                    acq = int(r.results["acquisitions"].sum())
                    insns = _stat_delta(r, "insn_emulation")
                    cpu_ns = int(r.threads["cpu_ns"].sum())
                    p = guest_path(w, 1)
                    loop_insns = (p["hold_loop"] + p["think_loop"]) * acq
                    rows.append((loop, acq, insns, cpu_ns, loop_insns, _iteration_insns(w, 1), r))
                # cpu = a·(insns − loop) + b·loop for both runs
                (_, a1, i1, c1, l1, n1, _), (_, a2, i2, c2, l2, _, _) = rows
                m = np.array([[i1 - l1, l1], [i2 - l2, l2]], dtype=float)
                a, b = np.linalg.solve(m, np.array([c1, c2], dtype=float))
                if not (a > 0 and b > 0):
                    # a disturbed or degenerate pair: one cost for every instruction
                    a = b = (c1 + c2) / max(i1 + i2, 1)
                pairs.append((float(a), float(b), rows))
            k = int(np.argsort([x[0] for x in pairs])[len(pairs) // 2])
            a, b, rows = pairs[k]
            b = float(np.median([x[1] for x in pairs]))
            (_, a1, i1, c1, l1, n1, _), (_, a2, i2, c2, l2, _, _) = rows
            how = (
                f"vCPU thread CPU time of two 1-vCPU TAS SpinLock runs on CPU {cpu} (hold=think=5, {a1} iterations; "
                f"400, {a2}) = path·a + loop·b, instruction totals from insn_emulation; the median of "
                f"{COST_REPEATS} such pairs (path: {', '.join(f'{x[0]:.0f}' for x in pairs)} ns)"
            )
            vals["path_insn_ns"] = Value(float(a), "ns", how)
            vals["loop_insn_ns"] = Value(float(b), "ns", how)
            vals["insns_per_acq_measured"] = Value(
                i1 / max(a1, 1), "insns", "insn_emulation / acquisitions, short-loop run"
            )
            vals["insns_per_acq_counted"] = Value(n1, "insns", "guest_path() count for the short-loop run")
            short = rows[0][6]  # the median pair's short run
            vals["uncontended_wait_ns"] = Value(
                float(short.results["wait_per_acq_us"][0]) * 1e3,
                "ns",
                f"RDTSC-timed wait per acquisition of the short-loop 1-vCPU run (counted: {guest_path(SpinLock(), 1)['wait_path']} "
                f"instructions x path_insn_ns = {guest_path(SpinLock(), 1)['wait_path'] * a:.0f} ns)",
            )
            vals["tsc_khz"] = Value(float(_tsc_khz()), "kHz", "KVM_GET_TSC_KHZ of a vCPU")

            rtt: dict[str, float] = {}
            for key, gap, poll in (("block", 200.0, 0), ("poll", 20.0, 200_000)):
                r = run(
                    MsiPingPong(rounds=300, gap_us=gap),
                    vcpus=1,
                    pcpus=[cpu],
                    duration_s=10.0,
                    halt_poll_ns=poll,
                    sample_every_s=None,
                )
                rounds = max(int(r.results["rounds"][0]), 1)
                per_round = _stat_delta(r, "insn_emulation") / rounds
                succ = _stat_delta(r, "halt_successful_poll")
                halts = max(_stat_delta(r, "halt_exits"), 1)
                rtt[key] = float(r.results["rtt_median_us"][0]) * 1e3 - per_round * a
                vals[f"wake_{key}_ns"] = Value(
                    max(rtt[key], 0.0),
                    "ns",
                    f"MsiPingPong on CPU {cpu}, 300 rounds, gap {gap:g} us, max poll {poll} ns: median round trip "
                    f"minus {per_round:.0f} guest instructions x path_insn_ns; {succ}/{halts} halts polled",
                )
                vals["msi_round_insns"] = Value(per_round, "insns", "insn_emulation / rounds of the MsiPingPong runs")
            vals.update(_calibrate_ipi(allowed, cpu, a))
            vals.update(_calibrate_sched(cpu, a))
        cal = Calibration(values=vals, cpu=cpu)
        _CACHE[cpu] = cal
        return cal


#: instructions of vCPU 0's IpiPingPong round outside its timed window (``mov [rbx], r12; jmp;
#: cmp r12; jae; mov r14, [rsi]; rdtsc; shl; or; mov r13, rax``: src/kvm/guest/program.rs, gap 0)
IPI_OUTSIDE_INSNS = 9


def _calibrate_sched(cpu: int, path_insn_ns: float) -> dict[str, Value]:
    """What a twin of a run under vcpulab's scheduler needs: the cost of an
    exit to user space (an ``io_loop`` of 2000 port writes: the vCPU thread's
    CPU time per exit minus its 3 guest instructions), and the token
    hand-off (spin exit → the candidate entering KVM_RUN) of a directed-yield
    run of a ticket lock, 3 vCPUs on ``cpu``: the median of ``Run.spins.latency_ns``."""
    from vcpulab import sched
    from vcpulab.experiment import run
    from vcpulab.kvm import Host
    from vcpulab.sim import policies as P

    n = 2000
    cpu_ns: list[int] = []

    def exits() -> None:
        os.sched_setaffinity(0, {cpu})
        c0 = time.thread_time_ns()
        v.run_until("ucall", timeout_s=20)
        cpu_ns.append(time.thread_time_ns() - c0)

    with Host().create_vm(memory_mib=4) as vm:
        v = vm.create_vcpu(0)
        v.start(vm.load("io_loop", port=0x80, count=n))
        t = threading.Thread(target=exits)
        t.start()
        t.join(30)
    if not cpu_ns:
        raise TimeoutError(f"twins.calibrate: the io_loop of {n} exits on CPU {cpu} did not finish")
    per_exit = cpu_ns[0] / n - 3 * path_insn_ns
    r = run(
        SpinLock(kind="ticket"),
        vcpus=3,
        pcpus=[cpu],
        duration_s=0.3,
        sample_every_s=None,
        scheduler=sched.directed_yield(P.dy_eligible()),
    )
    assert r.spins is not None
    lat = r.spins.filter(pl.col("latency_ns") > 0)["latency_ns"]
    handoff = float(lat.median()) if lat.len() else 10_000.0  # type: ignore[arg-type]
    return {
        "uexit_ns": Value(
            max(per_exit, 0.0),
            "ns",
            f"io_loop of {n} port writes on CPU {cpu}: vCPU thread CPU time per exit minus 3 instructions x path_insn_ns",
        ),
        "sched_handoff_ns": Value(
            handoff,
            "ns",
            f"directed_yield(dy_eligible) of a ticket SpinLock, 3 vCPUs on CPU {cpu}, 0.3 s: median of "
            f"{lat.len()} spin exit -> candidate enters KVM_RUN latencies",
        ),
    }


def _calibrate_ipi(allowed: Sequence[int], cpu: int, path_insn_ns: float) -> dict[str, Value]:
    """IPI delivery to a halted vCPU: ``IpiPingPong`` on two vCPUs (one CPU
    each: ``cpu`` and another usable one, else both on ``cpu``), halt polling
    off. A run with no gap counts the round's instructions (``insn_emulation``
    / rounds); one with 200 µs gaps (both vCPUs halted long enough to block)
    times the round trip. Each round trip holds two wake-ups of a blocked vCPU
    and the round's instructions inside the timed window (all but
    [`IPI_OUTSIDE_INSNS`][vcpulab.twins.IPI_OUTSIDE_INSNS]), so one wake-up = (median round trip − those
    instructions × ``path_insn_ns``) / 2."""
    from vcpulab.experiment import run

    other = [c for c in allowed if c != cpu]
    placement = [[other[0]], [cpu]] if other else [[cpu], [cpu]]
    where = f"vCPU 0 on CPU {placement[0][0]}, vCPU 1 on CPU {placement[1][0]}"
    out: dict[str, Value] = {}
    r0 = run(
        IpiPingPong(rounds=300, gap_us=0.0),
        vcpus=2,
        placement=placement,
        duration_s=10.0,
        halt_poll_ns=0,
        sample_every_s=None,
    )
    per_round = _stat_delta(r0, "insn_emulation") / max(int(r0.results["rounds"][0]), 1)
    out["ipi_round_insns"] = Value(
        per_round, "insns", f"insn_emulation / rounds of IpiPingPong, gap 0, 300 rounds, {where}"
    )
    r = run(
        IpiPingPong(rounds=300, gap_us=200.0),
        vcpus=2,
        placement=placement,
        duration_s=10.0,
        halt_poll_ns=0,
        sample_every_s=None,
    )
    inside = max(per_round - IPI_OUTSIDE_INSNS, 0.0)
    rtt = float(r.results["rtt_median_us"][0]) * 1e3
    out["ipi_wake_ns"] = Value(
        max((rtt - inside * path_insn_ns) / 2, 0.0),
        "ns",
        f"IpiPingPong, gap 200 us, max poll 0, 300 rounds, {where}: (median round trip {rtt / 1e3:.1f} us − "
        f"{inside:.0f} instructions x path_insn_ns) / 2 wake-ups",
    )
    return out


def _tsc_khz() -> int:
    from vcpulab.kvm import Host

    h = Host()
    vm = h.create_vm(memory_mib=4)
    try:
        return int(vm.create_vcpu(0).tsc_khz)
    finally:
        vm.close()


# ---------------------------------------------------------------------- experiments


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
            ``cpus`` (its run tokens), whatever ``pinning`` says.
    """

    workload: Workload
    vcpus: int = 2
    pcpus: tuple[int, ...] = (0,)
    pinning: Literal["shared", "one_each"] = "one_each"
    duration_s: float = 0.3
    halt_poll_ns: int | None = None
    scheduler: Any = None

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
        classes = {c.program: c for c in (SpinLock, PvSpinLock, MsiPingPong, IpiPingPong, IdleTicks, Spin)}
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
            return cls(w, n, tuple(cpus_all), "shared", float(cfg["duration_s"]), cfg.get("halt_poll_ns"), s)
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

# ----------------------------------------------------------------------------- twin


def _host_field(name: str) -> bool:
    return name in {f.name for f in fields(sim.Host)}


#: always-runnable workloads (their vCPU threads compete for the CPU all the time)
_RUNNABLE = (SpinLock, Spin)


def background_for(exp: Experiment, other_share: float, burst_ns: float | None = None) -> sim.Background:
    """The simulated host load that took ``other_share`` (a fraction of the run's
    CPU time, measured by [`vcpulab.quality.Quality`][]) from a real run.

    Other work is modelled as one task per host CPU whose CPU bursts last
    ``burst_ns`` (default 100 ms: CPU-bound compilers and test suites,
    assumption; [`compare`][vcpulab.twins.compare] keeps the default and reports the other
    tasks' measured mean burst beside it, see its comment):

    * always-runnable workloads (SpinLock, Spin): the run's ``n`` vCPU
      threads per CPU competed with the others all the time, so the others
      are one always-runnable task (utilization 0.999) with the weight of the
      ``k = n · s / (1 − s)`` nice-0 tasks that take the share ``s`` from
      ``n`` nice-0 threads. Caveat: steal then agrees by construction (the
      others' share plus the siblings'), which [`compare`][vcpulab.twins.compare] reports.
    * halting workloads (MsiPingPong, IdleTicks, PvSpinLock's halts): the
      vCPU left its CPU idle most of the time and the others filled it, so
      ``s`` says how long they ran, not how many there were: one nice-0 task
      with utilization ``s``.
    """
    if not 0.0 <= other_share < 1.0:
        raise ValueError(f"other_share must be in [0, 1), got {other_share}")
    if other_share <= 0.0:
        return sim.Background()
    burst = int(min(max(burst_ns if burst_ns else 100_000_000, 1000), 10**9))
    if not isinstance(exp.workload, _RUNNABLE):
        return sim.Background(utilization=min(other_share, 0.99), burst_ns=burst, weight=1024)
    n = exp.vcpus / len(exp.pcpus)
    k = n * other_share / (1.0 - other_share)
    return sim.Background(utilization=0.999, burst_ns=burst, weight=int(min(max(round(1024 * k), 2), 88761)))


#: just under the simulator's limit on one noise source (half a CPU, HostNoise)
_NOISE_MAX_NS_PER_S = 0.499e9


def host_load_for(
    exp: Experiment, load: OtherLoad, machine_cpus: int | None = None
) -> tuple[sim.Background, sim.HostNoise]:
    """The simulated host load of a measured [`OtherLoad`][vcpulab.twins.OtherLoad]: the short
    tasks as the simulator's host noise, the long ones as its background task.

    * short tasks → ``HostNoise`` kernel-thread bursts on every CPU: mean
      length ``short_burst_ns``, ``share × short_fraction / short_burst_ns``
      bursts per second (Poisson arrivals; each wake-up may preempt a vCPU,
      as each of the real short tasks' wake-ups may). The simulator allows
      at most half a CPU of noise; any excess moves to the background.
    * long tasks → [`background_for`][vcpulab.twins.background_for] with the rest of the share (its
      weight is computed against the CPU time the vCPUs kept, ``1 − share``).
    * the experiment's own VMM thread (measured ``vmm_wakeups_per_s`` and
      ``vmm_burst_ns``) → ``HostNoise.vmm_io_*``: one unpinned thread per VM
      that wakes at that rate (Poisson; the real loop wakes every 5-10 ms)
      for that long. Its time on the run's CPUs is part of ``share``; when
      the twin has only the run's CPUs (``machine_cpus`` None or no more
      than the run's) the simulator places the thread there, so all of it
      is taken out of the long tasks' part; when the twin models more of
      the machine ([`twin_machine_cpus`][vcpulab.twins.twin_machine_cpus]) the thread goes to an idle CPU
      as the real one does, and nothing is taken out.

      The measured number of short tasks, spread evenly over the machine's
      CPUs, is ``HostNoise.kthreads_per_cpu`` (1-64): independent noise
      tasks, each with its own arrivals and lag, so that each one's wake-up
      may preempt a vCPU as a real short task's does (one task carrying all
      of them has used its share and rarely preempts: docs/twins.md, §4).

    Simplifications: the short tasks share the rate equally, each a Poisson
    process (a noise task accumulates work while it runs, as a kworker
    does), nice 0; the split is machine-wide (see [`OtherLoad`][vcpulab.twins.OtherLoad]).
    """
    vmm: dict[str, Any] = {}
    s_vmm = 0.0
    if load.vmm_wakeups_per_s > 0 and load.vmm_burst_ns == load.vmm_burst_ns:
        v_ns = int(min(max(round(load.vmm_burst_ns), 100), 10**9))
        v_hz = min(load.vmm_wakeups_per_s, 100_000.0, _NOISE_MAX_NS_PER_S / v_ns)
        vmm = dict(vmm_io_hz=v_hz, vmm_io_ns=v_ns)
        if machine_cpus is None or machine_cpus <= len(exp.pcpus):
            s_vmm = v_hz * v_ns / 1e9 / len(exp.pcpus)
    if load.share <= 0.0:
        return sim.Background(), sim.HostNoise(**vmm)
    s_short = load.share * load.short_fraction if load.short_fraction > 0 else 0.0
    noise = sim.HostNoise(**vmm)
    if s_short > 0.0:
        ns = int(min(max(round(load.short_burst_ns), 100), 10**9))
        hz = min(s_short * 1e9 / ns, 100_000.0, _NOISE_MAX_NS_PER_S / ns)
        s_short = hz * ns / 1e9
        # each measured short task is a task of its own (its own wake-ups and
        # lag), spread evenly over the machine's CPUs
        per_cpu = int(min(max(math.ceil(load.short_tasks / max(os.cpu_count() or 1, 1)), 1), 64))
        noise = sim.HostNoise(kthread_hz=hz, kthread_ns=ns, kthreads_per_cpu=per_cpu, **vmm)
    s_long = max(load.share - s_short - s_vmm, 0.0)
    if s_long <= 0.0:
        return sim.Background(), noise
    burst = load.long_burst_ns if load.long_burst_ns == load.long_burst_ns else None
    if not isinstance(exp.workload, _RUNNABLE):
        return background_for(exp, s_long, burst), noise
    n = exp.vcpus / len(exp.pcpus)
    k = n * s_long / (1.0 - load.share)
    return sim.Background(
        utilization=0.999, burst_ns=100_000_000, weight=int(min(max(round(1024 * k), 2), 88761))
    ), noise


#: distribution of a spin-lock twin's think and hold times around their
#: counted means. The real iteration's length varies (the cost of an emulated
#: instruction drifts: 685-948 ns per path instruction between runs a second
#: apart here), so the phase of an iteration at which the 4 ms tick preempts a
#: vCPU (holding the lock or not) is random. With fixed lengths the twin's
#: vCPUs lock into one phase and the throughput of contended cells swings with
#: the exact costs (TAS 50/50 4 vCPUs on one CPU: 2189 fixed vs 3075 uniform
#: vs 3096 exponential acquisitions/s; real 2844-3104); any random width gives
#: about the same, so the simulator's narrowest random distribution is used:
#: uniform on [mean/2, 3·mean/2], the mean kept
SPIN_PHASE_DIST = "uniform"

#: pairs of cost runs [`calibrate`][vcpulab.twins.calibrate] takes the median of
COST_REPEATS = 5

#: the most host CPUs a twin models: the run's, then the machine's others up
#: to this (one idle CPU is all the VMM thread needs; noise on a CPU without
#: vCPUs touches none)
TWIN_MAX_MACHINE_CPUS = 16


def twin_machine_cpus(exp: Experiment, cal: Calibration) -> int:
    """How many host CPUs the twin of ``exp`` models: the run's CPUs plus the
    machine's others (``cal["machine_cpus"]``, at most
    [`TWIN_MAX_MACHINE_CPUS`][vcpulab.twins.TWIN_MAX_MACHINE_CPUS] in all) for ``one_each`` pinning; the run's
    CPUs alone for ``shared`` pinning over several CPUs (the simulator's
    unpinned vCPUs would roam the whole machine) or a calibration without
    ``machine_cpus``.

    Why: the real run pins only its vCPU threads; its VMM thread (the run
    loop, which wakes every 5-10 ms) and the host's other tasks are placed
    by the kernel on any CPU, an idle one first (``select_idle_sibling``).
    On an idle two-CPU host a 1-CPU run's vCPUs are switched exactly at the
    4 ms ticks (docs/twins.md, section 4); a twin of the run's CPU alone put
    the VMM thread's ~200 wake-ups a second onto the vCPUs' CPU.
    """
    n = len(exp.pcpus)
    if "machine_cpus" not in cal.values or (exp.pinning == "shared" and n > 1):
        return n
    return max(n, min(int(cal["machine_cpus"]), TWIN_MAX_MACHINE_CPUS))


def start_gap_of(runs: Sequence[Run]) -> float | None:
    """The measured gap between vCPU thread starts, ns: the median, over the
    runs, of the differences between consecutive ``Run.threads.start_ns``
    (each thread's start, just before it pins itself to its CPUs, i.e. joins
    their run queue). The median leaves out the rare starts a thread made
    only after waiting for a busy CPU (whole 4 ms ticks here), a wait the
    simulator's scheduler makes itself. None with fewer than two vCPUs or
    runs without ``start_ns``.

    Measured here (2-CPU host, idle): 5-36 µs for 2-8 vCPUs on one CPU.
    """
    gaps: list[float] = []
    for r in runs:
        th = r.threads
        if "start_ns" not in th.columns or th.height < 2:
            continue
        st = np.sort(th["start_ns"].cast(pl.Float64).to_numpy())
        gaps.extend(float(x) for x in np.diff(st))
    return float(np.median(gaps)) if gaps else None


def _start_gap(v: Any) -> float:
    """``start_gap_ns`` as a float of ns in [0, 1e9] (numpy's numbers too), else ValueError."""
    ok = not isinstance(v, bool) and isinstance(v, numbers.Real) and math.isfinite(v) and 0 <= float(v) <= 1e9
    if not ok:
        raise ValueError(f"start_gap_ns must be a number of ns in [0, 1e9] (or None), got {v!r}")
    return float(v)


def twin(
    exp: Experiment | Run,
    cal: Calibration | None = None,
    *,
    seed: int = 0,
    trace: bool = False,
    other_share: float | None = None,
    other_burst_ns: float | None = None,
    other_load: OtherLoad | None = None,
    start_gap_ns: float | None = None,
) -> sim.Config:
    """The simulated configuration of the real experiment ``exp``.

    * Host: the run's CPUs and, for ``one_each`` pinning, the machine's
      others ([`twin_machine_cpus`][vcpulab.twins.twin_machine_cpus]: vCPU i pinned to the run's CPU
      i mod n via ``Host.vcpu_pcpus``, the VMM thread and host noise free
      to use the rest), the fair (EEVDF-like) scheduler with this
      kernel's ``base_slice_ns`` and tick; ``affinity="round_robin"`` for
      ``one_each`` pinning (vCPU g on CPU g mod P, as the real placement),
      ``"all"`` for ``shared`` on several CPUs (the simulator then has
      wake-up placement and newidle pulls but no periodic load balancing),
      ``"pinned"`` on one CPU. ``tsc_khz`` from the vCPU. ``wakeup_ipi_ns``
      = the measured blocked-halt wake-up latency where the host model has it.
    * VM: no PLE (this host has no VMX/SVM, so no pause-loop exits), no
      directed-yield policy, steal time on, no PV sched-yield, no posted
      interrupts; ``halt_exit_ns`` = one emulated instruction (the HLT is
      emulated like every other); halt polling ``block-time`` (upstream) with the module's
      grow/shrink parameters and the run's maximum (``off`` when it is 0).
    * Workload: SpinLock → ``Compute(think) + Lock(kind, hold)`` with the
      counted instructions × the measured costs, each drawn around that mean
      ([`SPIN_PHASE_DIST`][vcpulab.twins.SPIN_PHASE_DIST]); PvSpinLock → a ``tas`` lock
      (this host never sets the ``preempted`` byte, so the real waiters never
      halt unless ``preempted_from_host`` is used, which has no twin);
      MsiPingPong → ``Sleep(gap) + Compute(round path)``; IdleTicks →
      ``Sleep(period, periodic=True) + Compute(path)`` per vCPU (the LAPIC
      timer's fixed grid); Spin → one long ``Compute``.

    * Host load: none by default (the twin of the experiment on an idle
      host); ``other_share`` (from ``Run.quality``; a Run passed as ``exp``
      brings its own) adds [`background_for`][vcpulab.twins.background_for]'s background task.
    * Start: ``start_gap_ns`` ([`start_gap_of`][vcpulab.twins.start_gap_of], measured on the real
      runs; a Run passed as ``exp`` brings its own) makes the vCPU threads
      arrive one by one as the real ones do (``Host.start_gap_ns``: new
      tasks placed with half a slice to their deadline); None or 0: all at
      time 0. The host's EEVDF notices an expired slice at every wake-up
      onto a busy CPU (``Host.slice_check_on_wakeup``, as the kernel's
      ``update_curr`` does at enqueue) and protects a picked task's slice
      against wake-ups (``Host.run_to_parity``: this host's 6.18 kernel has
      RUN_TO_PARITY on, the default).

    IpiPingPong → thread 0 ``Compute(gap + outside path), Send, Recv``, thread
      1 ``Recv, Compute(the round's timed instructions), Send``
      (``Workload.thread0_phases``), ``rounds`` iterations, ``wakeup_ipi_ns``
      = the measured IPI wake-up (``ipi_wake_ns``). Simplification: the real
      gap is RDTSC (wall) time, the twin's is CPU time (a vCPU preempted in
      its gap lengthens the twin's round, not its round trip).

    Raises ``ValueError`` for experiments without a twin.
    """
    if other_share is not None:
        check_float("other_share", other_share, 0.0, 1.0, unit="(a share of the run's CPU time)")
        if other_share >= 1.0:
            raise ValueError(
                f"other_share must be below 1 (other tasks cannot take all of the CPU time), got {other_share}"
            )
    if other_burst_ns is not None:
        other_burst_ns = check_float("other_burst_ns", other_burst_ns, 0.0, 1e9, lo_open=True, unit="ns")
    if other_load is not None:
        check_type("other_load", other_load, OtherLoad)
    if start_gap_ns is not None:
        start_gap_ns = _start_gap(start_gap_ns)
    check_int("seed", seed, 0, 2**64 - 1)
    check_bool("trace", trace)
    if isinstance(exp, Run):
        if other_share is None and exp.quality.measured:
            # a measured share is capped at 0.99: a twin needs some CPU left for its vCPUs
            other_share = min(exp.quality.other_share, 0.99)
        if start_gap_ns is None:
            start_gap_ns = start_gap_of([exp])
        exp = Experiment.from_run(exp)
    check_type("exp", exp, Experiment)
    if cal is not None:
        check_type("cal", cal, Calibration)
    cal = cal or calibrate()
    w = exp.workload
    a, b = cal["path_insn_ns"], cal["loop_insn_ns"]
    knobs = {k: cal[k] for k in ("halt_poll_ns", "halt_poll_ns_grow", "halt_poll_ns_grow_start", "halt_poll_ns_shrink")}
    max_poll = int(knobs["halt_poll_ns"] if exp.halt_poll_ns is None else exp.halt_poll_ns)
    hp = sim.HaltPoll(
        policy="block-time" if max_poll > 0 else "off",
        max_ns=max_poll,
        grow=int(knobs["halt_poll_ns_grow"]),
        grow_start_ns=int(knobs["halt_poll_ns_grow_start"]),
        shrink=int(knobs["halt_poll_ns_shrink"]),
    )
    if isinstance(w, PvSpinLock) and w.preempted_from_host:
        raise ValueError(
            "PvSpinLock with preempted_from_host has no twin (the host-forced preempted byte is not modelled)"
        )
    name = type(w).__name__
    if isinstance(w, SpinLock):
        p = guest_path(w, exp.vcpus, pv_exits=exp.scheduler is not None)
        think_ns = p["think_path"] * a + p["think_loop"] * b
        hold_ns = p["hold_path"] * a + p["hold_loop"] * b
        kind = "tas" if isinstance(w, PvSpinLock) else w.kind
        # each iteration's length varies (the cost of an emulated instruction
        # drifts), so where a vCPU is in its iteration when the tick preempts
        # it is random; fixed lengths lock that phase (SPIN_PHASE_DIST)
        phases: tuple[Any, ...] = (
            sim.Compute(max(int(round(think_ns)), 1), dist=SPIN_PHASE_DIST, mode="kernel"),
            sim.Lock(0, kind, max(int(round(hold_ns)), 1), dist=SPIN_PHASE_DIST),
        )
        name = f"{name}:{kind}"
    elif isinstance(w, IpiPingPong):
        # vCPU 0: its RDTSC gap and the instructions outside its timed window,
        # then the IPI, then halt until the reply; vCPU 1: halt, then every
        # instruction of the round inside the window (its reply path and both
        # sides' halt and interrupt paths, on the critical path either way)
        inside = max(cal["ipi_round_insns"] - IPI_OUTSIDE_INSNS, 1.0)
        thread0 = (
            sim.Compute(max(int(round(w.gap_us * 1000 + IPI_OUTSIDE_INSNS * a)), 1), mode="kernel"),
            sim.Send(1),
            sim.Recv(),
        )
        phases = (sim.Recv(), sim.Compute(max(int(round(inside * a)), 1), mode="kernel"), sim.Send(1))
    elif isinstance(w, MsiPingPong):
        path = int(round(cal["msi_round_insns"] * a))
        phases = (sim.Sleep(int(w.gap_us * 1000)), sim.Compute(max(path, 1), mode="kernel"))
    elif isinstance(w, IdleTicks):
        # the LAPIC timer is periodic: wake on a fixed grid, late wake-ups
        # do not shift the next ones (a relative sleep would drift)
        period = 1_000_000_000 // w.hz
        path = int(round(cal["msi_round_insns"] * a))
        phases = (sim.Sleep(period, periodic=True), sim.Compute(max(min(path, period - 1), 1), mode="kernel"))
    elif isinstance(w, Spin):
        phases = (sim.Compute(1_000_000, mode="kernel"),)
    else:
        raise ValueError(f"no twin for workload {name}")
    n_cpus = len(exp.pcpus)
    affinity = "pinned" if n_cpus == 1 else ("round_robin" if exp.pinning == "one_each" else "all")
    machine = twin_machine_cpus(exp, cal)
    hkw: dict[str, Any] = dict(
        pcpus=machine,
        scheduler="fair",
        tick_ns=int(cal["tick_ns"]),
        base_slice_ns=int(cal["base_slice_ns"]),
        affinity=affinity,
        tsc_khz=max(int(cal["tsc_khz"]), 1000),
        slice_check_on_wakeup=True,
        run_to_parity=True,
    )
    if start_gap_ns is not None:
        start_gap_ns = _start_gap(start_gap_ns)
        if start_gap_ns >= 1:
            hkw["start_gap_ns"] = int(round(start_gap_ns))
    if machine > n_cpus:
        # vCPU i on the run's CPU i mod n (the real placement), the rest of
        # the machine left to the VMM thread and the host's other tasks
        hkw.update(affinity="round_robin", vcpu_pcpus=tuple(range(n_cpus)))
    if other_load is not None:
        hkw["background"], hkw["noise"] = host_load_for(exp, other_load, machine_cpus=machine)
    elif other_share:
        hkw["background"] = background_for(exp, float(other_share), other_burst_ns)
    if _host_field("wakeup_ipi_ns"):
        hkw["wakeup_ipi_ns"] = int(cal["ipi_wake_ns"] if isinstance(w, IpiPingPong) else cal["wake_block_ns"])
    ple, policy = sim.Ple.off(), sim.policies.no_yield()
    if exp.scheduler is not None:
        hkw, ple, policy = _scheduled_twin(exp, cal, hkw)
    wkw: dict[str, Any] = dict(phases=phases, name=name, iterations=int(getattr(w, "iterations", 0)))
    if isinstance(w, IpiPingPong):
        # the real run ends after its rounds: so does the twin (each thread one iteration per round)
        wkw.update(thread0_phases=thread0, iterations=int(w.rounds))
    vm = sim.Vm(
        vcpus=exp.vcpus,
        workload=sim.Workload(**wkw),
        ple=ple,
        policy=policy,
        pv=sim.Pv(steal_time=True, sched_yield=False, apicv=False, halt_exit_ns=max(int(round(a)), 0)),
        halt_poll=hp,
    )
    return sim.Config(host=sim.Host(**hkw), vms=(vm,), duration_ns=int(exp.duration_s * 1e9), seed=seed, trace=trace)


#: guest instructions of one failed spin iteration of the spin-lock programs
#: with pv_exits (program.rs): the lock test and its branch (2), PAUSE, the
#: PAUSE count, the window check (inc, mov, test, jz, cmp, jb) and the loop
#: branch (TAS: a nop and the free test's cmp; ticket: the jmp back)
PV_SPIN_ITER_INSNS = 11


def _scheduled_twin(exp: Experiment, cal: Calibration, hkw: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    """The host, PLE and policy of the twin of a run under vcpulab's scheduler
    ([`vcpulab.sched`][vcpulab.sched]).

    * ``round_robin``: the fair scheduler with base slice = the slice, every
      vCPU free on the run's CPUs (``affinity="all"``, the scheduler's one
      queue); ``gang``: the simulator's gang scheduler with the same slice;
    * ``directed_yield``: the same slices, plus pause-loop exits with the same
      window dynamics (the window counted in cycles: ``spin_window`` failed
      iterations x [`PV_SPIN_ITER_INSNS`][vcpulab.twins.PV_SPIN_ITER_INSNS] instructions x ``loop_insn_ns``
      at the vCPU's TSC rate), the exit's cost the calibrated user-space exit
      (``uexit_ns``), the same policy, and ``yield_to``'s cost the calibrated
      token hand-off (``sched_handoff_ns``, as ``Host.rq_lock_ns``: the
      spinner's CPU is busy with it before the candidate runs).
    * ``relaxed_co`` and ``balance`` have no twin: the simulator has neither
      mechanism (ValueError).

    Simplification: the pv spin exit is modelled as a VMX pause-loop exit
    (``kind="vmx"``): the window counts cycles of spinning in one wait, and the
    exit is taken at once (the real exit waits for the iteration to end)."""
    from vcpulab import sched

    s = exp.scheduler
    if isinstance(s, (sched.RelaxedCo, sched.Balance)):
        raise ValueError(
            f"no twin for a run under sched.{s.name}: the simulator has no {s.name.replace('_', ' ')} scheduling"
        )
    # the scheduler's CPUs are the whole twin (its tokens), the vCPUs free within them
    n = len(exp.pcpus)
    hkw = {k: v for k, v in hkw.items() if k != "vcpu_pcpus"}
    hkw.update(pcpus=n, affinity="pinned" if n == 1 else "all")
    slice_ns = int(s.slice_us * 1e3)
    if isinstance(s, sched.Gang):
        hkw.update(scheduler="gang", gang_slice_ns=slice_ns)
    else:
        hkw.update(base_slice_ns=slice_ns)
    ple, policy = sim.Ple.off(), sim.policies.no_yield()
    if isinstance(s, sched.DirectedYield):
        iter_cycles = PV_SPIN_ITER_INSNS * cal["loop_insn_ns"] * cal["tsc_khz"] / 1e6
        ple = sim.Ple(
            enabled=True,
            kind="vmx",
            window=max(int(round(s.spin_window * iter_cycles)), 1),
            grow=s.spin_grow,
            shrink=s.spin_shrink,
            max=min(int(s.spin_max * iter_cycles), sim.Ple().max),
            exit_ns=max(int(round(cal["uexit_ns"])), 1),
        )
        policy = s.policy
        if _host_field("rq_lock_ns"):
            hkw["rq_lock_ns"] = max(int(round(cal["sched_handoff_ns"])), 0)
    return hkw, ple, policy


# ------------------------------------------------------------------------- metrics

#: metric → (unit, what it is on both sides)
METRICS: dict[str, tuple[str, str]] = {
    "acq_per_s": ("1/s", "lock acquisitions per second, all vCPUs (real: guest counters / wall time of the run)"),
    "wait_per_acq_us": (
        "us",
        "mean wait per acquisition (real: guest RDTSC; sim: Lock phase start → lock held, waits still open at the end counted up to the end, + the timed wait_path instructions stretched by the running share)",
    ),
    "steal_fraction": (
        "",
        "steal time / wall time, mean over vCPUs (real: steal-time area; sim: runnable-not-running)",
    ),
    "ctx_switches_per_vcpu_s": (
        "1/s",
        "times a vCPU thread was switched in, per vCPU and second (real: voluntary + involuntary switches)",
    ),
    "halt_exits_per_s": ("1/s", "halt exits per second, all vCPUs (KVM stat halt_exits)"),
    "polled_per_halt": ("", "share of halts that ended in the poll loop (KVM stats halt_successful_poll / halt_exits)"),
    "rtt_median_us": (
        "us",
        "MSI / IPI round trip, median (real: MSI host-timed sent → next cue, IPI guest RDTSC; sim: iteration latency − the initiator's own time)",
    ),
    "ticks_per_s": ("1/s", "timer interrupts taken per second, all vCPUs"),
}
#: metrics per workload class
_BY_WORKLOAD: dict[type, tuple[str, ...]] = {
    SpinLock: ("acq_per_s", "wait_per_acq_us", "steal_fraction", "ctx_switches_per_vcpu_s"),
    PvSpinLock: ("acq_per_s", "wait_per_acq_us", "steal_fraction", "ctx_switches_per_vcpu_s", "halt_exits_per_s"),
    MsiPingPong: ("rtt_median_us", "polled_per_halt"),
    IpiPingPong: ("rtt_median_us", "polled_per_halt"),
    IdleTicks: ("ticks_per_s", "halt_exits_per_s", "polled_per_halt", "ctx_switches_per_vcpu_s"),
    Spin: ("steal_fraction", "ctx_switches_per_vcpu_s"),
}
#: KS-compared distributions
_DISTS: dict[type, tuple[str, ...]] = {
    SpinLock: ("steal_per_10ms",),
    PvSpinLock: ("steal_per_10ms",),
    Spin: ("steal_per_10ms",),
}


def _metrics_of(exp: Experiment) -> tuple[str, ...]:
    return _BY_WORKLOAD[type(exp.workload)]


def _token_time(r: Run) -> tuple[list[float], list[int]]:
    """Per vCPU of a scheduled run (vCPU order): ns it held a token, and how
    many times it got one (from ``Run.schedule``)."""
    d = r.schedule
    assert d is not None
    end = int(r.wall_s * 1e9)
    n = int(r.config["vcpus"])
    held, grants = [0.0] * n, [0] * n
    open_: dict[int, tuple[int, int]] = {}
    for x in d.sort("t_ns", maintain_order=True).iter_rows(named=True):
        if x["why"] == "watchdog":
            continue
        c = x["pcpu"]
        if c in open_:
            v, t = open_.pop(c)
            held[v] += max(0, min(x["t_ns"], end) - t)
        if x["in_vcpu"] >= 0:
            open_[c] = (x["in_vcpu"], x["t_ns"])
            grants[x["in_vcpu"]] += 1
    for v, t in open_.values():
        held[v] += max(0, end - t)
    return held, grants


def real_metrics(exp: Experiment, r: Run) -> dict[str, float]:
    """The compared metrics of one real run."""
    res, th = r.results, r.threads
    out: dict[str, float] = {}
    names = _metrics_of(exp)
    if "acq_per_s" in names:
        acq = res["acquisitions"].cast(pl.Float64)
        # over the whole run: after ``duration`` every vCPU still finishes its
        # iteration (one more acquisition), which under overcommit takes a while
        out["acq_per_s"] = float(acq.sum()) / r.wall_s
        w = res["wait_per_acq_us"].fill_nan(0.0)
        out["wait_per_acq_us"] = float((w * acq).sum() / max(float(acq.sum()), 1.0))  # type: ignore[operator]
    if r.schedule is not None and ("steal_fraction" in names or "ctx_switches_per_vcpu_s" in names):
        # under vcpulab's scheduler a waiting vCPU thread sleeps, so the kernel's steal
        # time and context switches do not see its waits: the decision log does
        held, grants = _token_time(r)
        if "steal_fraction" in names:
            out["steal_fraction"] = float(np.mean([1.0 - h / max(r.wall_s * 1e9, 1.0) for h in held]))
        if "ctx_switches_per_vcpu_s" in names:
            out["ctx_switches_per_vcpu_s"] = float(np.mean(grants)) / r.wall_s
    else:
        if "steal_fraction" in names:
            out["steal_fraction"] = float(r.steal_fraction()["steal_fraction"].mean())  # type: ignore[arg-type]
        if "ctx_switches_per_vcpu_s" in names:
            sw = th["voluntary_ctxt_switches"] + th["nonvoluntary_ctxt_switches"]
            secs = th["wall_ns"].cast(pl.Float64) / 1e9
            out["ctx_switches_per_vcpu_s"] = float((sw / secs).mean())  # type: ignore[arg-type]
    if "halt_exits_per_s" in names:
        out["halt_exits_per_s"] = _stat_delta(r, "halt_exits") / r.wall_s
    if "polled_per_halt" in names:
        out["polled_per_halt"] = _stat_delta(r, "halt_successful_poll") / max(_stat_delta(r, "halt_exits"), 1)
    if "rtt_median_us" in names:
        out["rtt_median_us"] = float(res["rtt_median_us"][0])
    if "ticks_per_s" in names:
        out["ticks_per_s"] = float(res["ticks"][0]) / r.wall_s
    return out


def sim_metrics(exp: Experiment, cfg: sim.Config, res: sim.Result, cal: Calibration) -> dict[str, float]:
    """The compared metrics of one simulated run."""
    vms, vc = res.vms, res.vcpus
    # a run of a fixed number of iterations ends when every thread is done
    # (as the real one does): rates over its wall time
    dur = (float(vms["wall_ns"][0]) if cfg.vms[0].workload.iterations > 0 else cfg.duration_ns) / 1e9
    out: dict[str, float] = {}
    names = _metrics_of(exp)
    if "acq_per_s" in names:
        out["acq_per_s"] = float(vms["lock_acquisitions"][0]) / dur
        if "lock_wait_mean_ns" in vms.columns:
            # the real wait is timed around wait_path instructions that the
            # simulated Lock phase does not execute; they run at the vCPU's
            # running share, so on average they last window / (1 - steal)
            window = (
                guest_path(exp.workload, exp.vcpus, pv_exits=exp.scheduler is not None)["wait_path"]
                * cal["path_insn_ns"]
            )
            running = 1.0 - float(vc["wait_ns"].mean()) / (dur * 1e9)  # type: ignore[operator, arg-type]
            # the real guest, told to stop, finishes every wait still open and
            # counts it: the twin's waits open at the end count too (up to the
            # end, a lower bound of what they would have lasted)
            mean = float(vms["lock_wait_mean_ns"][0])
            if "lock_waits_open" in vms.columns:
                closed, n_open = float(vms["lock_acquisitions"][0]), float(vms["lock_waits_open"][0])
                if closed + n_open > 0:
                    mean = (mean * closed + float(vms["lock_wait_open_mean_ns"][0]) * n_open) / (closed + n_open)
            out["wait_per_acq_us"] = (mean + window / max(running, 1e-3)) / 1e3
    if "steal_fraction" in names:
        out["steal_fraction"] = float(vc["wait_ns"].mean()) / (dur * 1e9)  # type: ignore[operator, arg-type]
    if "ctx_switches_per_vcpu_s" in names:
        out["ctx_switches_per_vcpu_s"] = float(vc["sched_in"].mean()) / dur  # type: ignore[operator, arg-type]
    if "halt_exits_per_s" in names:
        out["halt_exits_per_s"] = float(vc["halt_exits"].sum()) / dur
    if "polled_per_halt" in names:
        out["polled_per_halt"] = float(vc["halt_successful_poll"].sum()) / max(float(vc["halt_exits"].sum()), 1.0)
    if "rtt_median_us" in names:
        w = exp.workload
        assert isinstance(w, (MsiPingPong, IpiPingPong))
        ipi = _sim_ipi_rtt_ns(res) if isinstance(w, IpiPingPong) else None
        if ipi is not None:
            out["rtt_median_us"] = ipi / 1e3
        else:
            # a round = the initiator's own time outside the round trip + the round trip
            own = cfg.vms[0].workload.thread0_phases[0].ns if isinstance(w, IpiPingPong) else w.gap_us * 1000
            out["rtt_median_us"] = (float(vms["lat_p50_ns"][0]) - own) / 1e3
    if "ticks_per_s" in names:
        out["ticks_per_s"] = float(vms["ops"][0]) / dur
    return out


def _sim_ipi_rtt_ns(res: sim.Result) -> float | None:
    """The median round trip of an IpiPingPong twin. vCPU 0 halts right after
    its IPI, so each round trip is one of its halts:

    * a halt that blocked: from the trace, its interval that ended in the
      blocking halt at ``h`` and its next interval at ``r`` give ``r − h``,
      plus the mean failed poll before blocking (``halt_poll_fail_ns`` over
      the blocked halts; 0 with polling off);
    * a halt a poll caught (no halt in the trace: the vCPU stays on its CPU):
      the mean successful poll (``halt_poll_success_ns`` /
      ``halt_successful_poll``), once per such halt.

    Not the iteration latency minus the gap: the real gap is RDTSC (wall)
    time, the twin's a Compute that other tasks stretch. Simplification: the
    polls' per-halt lengths are their means. None without a trace or a halt.
    """
    if res.trace is None:
        return None
    t = res.trace.filter((pl.col("vm") == 0) & (pl.col("vcpu") == 0)).sort("start_ns")
    st, en, why = t["start_ns"].to_numpy(), t["end_ns"].to_numpy(), t["why"].to_list()
    blocked = [float(st[i + 1]) - float(en[i]) for i in range(len(st) - 1) if why[i] == "halt"]
    v0 = res.vcpus.row(0, named=True)
    n_succ = int(v0["halt_successful_poll"])
    fail = float(v0["halt_poll_fail_ns"]) / len(blocked) if blocked else 0.0
    rtt = [b + fail for b in blocked]
    if n_succ > 0:
        rtt += [float(v0["halt_poll_success_ns"]) / n_succ] * n_succ
    return float(np.median(rtt)) if rtt else None


def real_steal_intervals(r: Run, bin_ns: int = 10_000_000) -> np.ndarray:
    """Steal as the guest sees it, per ``bin_ns`` bin and vCPU: the growth of
    each vCPU's steal-time area over the bin / ``bin_ns``. The sampler's
    irregular samples are put on a fixed grid (the last sample at or before
    each bin edge), so that a late sample does not turn into a short interval
    with a huge ratio. KVM publishes steal at vCPU entry
    (``record_steal_time``), so a bin can show more than its length in steal
    and the next none; not clipped."""
    out = []
    for _, g in r.samples.sort("t_ns").group_by(["vm", "vcpu"], maintain_order=True):
        t = g["t_ns"].to_numpy().astype(np.int64)
        st = g["steal_ns"].to_numpy().astype(float)
        if t.size < 2:
            continue
        edges = np.arange(t[0], t[-1] + 1, bin_ns)
        if edges.size < 2:
            continue
        cum = st[np.searchsorted(t, edges, side="right") - 1]
        out.append(np.diff(cum) / bin_ns)
    return np.concatenate(out) if out else np.empty(0)


def sim_steal_intervals(res: sim.Result, bin_ns: int = 10_000_000) -> np.ndarray:
    """The same from a simulated run's trace, for always-runnable vCPUs: each
    wait between two runs of a vCPU is published at the start of the second
    (its sched-in, as KVM does), and summed per ``bin_ns`` bin / ``bin_ns``."""
    if res.trace is None:
        raise ValueError("sim_steal_intervals needs a run with trace=True")
    warm = res.config.warmup_ns  # bins from the end of the warm-up
    dur = res.config.duration_ns - warm
    nb = dur // bin_ns
    if nb < 1:
        return np.empty(0)
    t = res.trace.filter(pl.col("vcpu") >= 0).sort(["vm", "vcpu", "start_ns"])
    out = []
    seen = 0
    for _, g in t.group_by(["vm", "vcpu"], maintain_order=True):
        seen += 1
        st, en = g["start_ns"].to_numpy(), g["end_ns"].to_numpy()
        gaps = np.concatenate([[st[0]], st[1:] - en[:-1]]).astype(float)
        k = ((st.astype(np.int64) - warm) // bin_ns).astype(int)
        ok = (k >= 0) & (k < nb)
        out.append(np.bincount(k[ok], weights=gaps[ok], minlength=nb)[:nb] / bin_ns)
    for _ in range(res.vcpus.height - seen):  # a vCPU that never ran publishes nothing
        out.append(np.zeros(nb))
    return np.concatenate(out) if out else np.empty(0)


# -------------------------------------------------------------------------- running


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
            it includes the VMM thread's time on those CPUs), 0-1.
        short_fraction: the short tasks' part of the others' CPU time, machine-wide, 0-1.
        short_burst_ns: the short tasks' mean burst, ns (their CPU time / timeslices).
        long_burst_ns: the long tasks' mean burst, ns (NaN when none ran).
        short_tasks, long_tasks: how many tasks of each class ran.
        base_slice_ns: the class boundary used, ns.
        vmm_wakeups_per_s: timeslices per second of the experiment's own
            non-vCPU threads (0: not measured).
        vmm_burst_ns: their CPU time per timeslice, ns (NaN: not measured).

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
    ) -> OtherLoad:
        """From two `_task_schedstat` snapshots (tasks in ``own`` left
        out; a task born meanwhile counts from 0, one that exited is missed)."""
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
        return cls(
            share=min(max(float(share), 0.0), 0.99),
            short_fraction=sc / tot if tot else 0.0,
            short_burst_ns=sc / ss if ss else float("nan"),
            long_burst_ns=lc / ls if ls else float("nan"),
            short_tasks=ns_,
            long_tasks=nl,
            base_slice_ns=float(base_slice_ns),
            vmm_wakeups_per_s=float(vmm[0]),
            vmm_burst_ns=float(vmm[1]),
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


def run_real(
    exp: Experiment,
    trials: int = 3,
    failures: list[str] | None = None,
    cal: Calibration | None = None,
    trace: bool = False,
) -> list[Run]:
    """``trials`` real runs of ``exp`` (each records its [`Quality`][vcpulab.quality.Quality]
    and, in ``Run.config["other_load"]``, the other tasks' [`OtherLoad`][vcpulab.twins.OtherLoad]
    as a dict; the short/long boundary is ``cal``'s base slice, else [`host_knobs`][vcpulab.twins.host_knobs]').

    A trial that misses its deadline (``TimeoutError``: an MSI ping-pong whose
    vCPU other tasks kept off its CPU) is left out and its message appended to
    ``failures``; when every trial fails the last error is raised. ``trace``:
    each trial records the kernel's trace (``run(trace=True)``: ``Run.trace``,
    ``Run.wakeups``; docs/tracing.md)."""
    check_int("trials", trials, 1, 1000)
    exp.check_runnable()
    out: list[Run] = []
    last: TimeoutError | None = None
    base_slice = cal["base_slice_ns"] if cal is not None else float(host_knobs()["base_slice_ns"].value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quality is recorded in each Run and reported per cell
        for _ in range(trials):
            try:
                me = {int(t) for t in os.listdir("/proc/self/task")}
                before = _task_schedstat()
                with _VmmProbe(exp.duration_s) as probe:
                    r = exp.run(trace=True) if trace else exp.run()
                after = _task_schedstat()
                own = me | {int(t) for t in r.threads["tid"]} | {int(t) for t in os.listdir("/proc/self/task")}
                share = r.quality.other_share
                r.config["other_load"] = OtherLoad.measure(
                    before, after, own, share, base_slice, probe.result()
                ).as_dict()
                out.append(r)
            except TimeoutError as e:
                last = e
                if failures is not None:
                    failures.append(str(e))
            except KeyboardInterrupt as e:
                keep_partial(e, out, call="twins.run_real", done=len(out), total=trials, unit="real trials")
                raise
    if not out and last is not None:
        raise last
    return out


def run_sim(
    exp: Experiment,
    cal: Calibration,
    seeds: int = 3,
    trace: bool = True,
    other_share: float | None = None,
    other_burst_ns: float | None = None,
    other_load: OtherLoad | None = None,
    trace_all: bool = False,
    start_gap_ns: float | None = None,
) -> list[tuple[sim.Config, sim.Result]]:
    """The twin run with seeds 0..seeds-1 (``other_share``, ``other_load``, ``start_gap_ns``: see [`twin`][vcpulab.twins.twin]).
    ``trace``: traced where a compared quantity needs it; ``trace_all``: every run."""
    check_int("seeds", seeds, 1, 1000)
    out = []
    for s in range(seeds):
        traced = trace_all or type(exp.workload) in _DISTS or isinstance(exp.workload, IpiPingPong)
        cfg = twin(
            exp,
            cal,
            seed=s,
            trace=trace and traced,
            other_share=other_share,
            other_burst_ns=other_burst_ns,
            other_load=other_load,
            start_gap_ns=start_gap_ns,
        )
        out.append((cfg, sim.run(cfg)))
    return out


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov distance: the largest difference between
    the two empirical distribution functions (NaN if a sample is empty)."""
    a, b = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    if a.size == 0 or b.size == 0:
        return float("nan")
    x = np.concatenate([a, b])
    fa = np.searchsorted(a, x, side="right") / a.size
    fb = np.searchsorted(b, x, side="right") / b.size
    return float(np.abs(fa - fb).max())


#: below these (absolute) values on both sides a metric is "uninformative" (0 vs 0)
FLOORS: dict[str, float] = {
    "acq_per_s": 1.0,
    "wait_per_acq_us": 0.0,
    "steal_fraction": 0.02,
    "ctx_switches_per_vcpu_s": 5.0,
    "halt_exits_per_s": 5.0,
    "polled_per_halt": 0.05,
    "rtt_median_us": 0.0,
    "ticks_per_s": 1.0,
}


def compare(
    exp: Experiment,
    trials: int = 3,
    seeds: int = 3,
    cal: Calibration | None = None,
    real: Sequence[Run] | None = None,
    load: Literal["measured", "one_task", "none"] = "measured",
    trace: bool = False,
) -> pl.DataFrame:
    """Real vs twin, one row per metric (and per KS-compared distribution).

    ``load="measured"`` (default) gives the twin the other load the real
    trials measured: their [`OtherLoad`][vcpulab.twins.OtherLoad] pooled, short tasks as host
    noise and long ones as a background task ([`host_load_for`][vcpulab.twins.host_load_for]);
    ``"one_task"`` the previous model, all of the measured share as one
    background task per CPU ([`background_for`][vcpulab.twins.background_for]); ``"none"`` simulates
    an idle host. The twin's vCPU threads start as the real trials' did
    ([`start_gap_of`][vcpulab.twins.start_gap_of]).

    Columns: ``metric``, ``unit``, ``real`` (mean over trials) with
    ``real_lo``/``real_hi`` (95 % t-interval; NaN with one trial), ``sim``
    with ``sim_lo``/``sim_hi`` (over seeds), ``rel_err`` = |sim − real| /
    |real|, ``informative`` (False when both sides are below the metric's
    floor, e.g. 0 vs 0 halts), ``ks`` (two-sample Kolmogorov-Smirnov
    distance, distributions only), ``disturbed_trials`` (real trials whose
    [`Quality`][vcpulab.quality.Quality] crossed a threshold) and
    ``other_share_max`` (the largest share of the run's CPU time other tasks
    took), ``other_share_twin`` (the mean share the twin was given),
    ``other_short_fraction`` and ``other_burst_ns`` (the short tasks' part of
    the others' CPU time and their mean burst, ns, pooled over the trials:
    [`OtherLoad`][vcpulab.twins.OtherLoad]) and ``steal_by_construction``. Pass ``real`` to reuse
    real runs of ``exp``.

    ``trace=True``: the real trials are traced (``run(trace=True)``) and two
    more rows compare distributions ([`distributions`][vcpulab.twins.distributions], trials and seeds
    pooled): ``slice_ns`` (every vCPU run slice) and ``wakeup_latency_ns``
    (guest timer → vCPU running); ``real``/``sim`` are the medians, ``ks``
    the two-sample KS statistic. The twin's wake-ups are derived from its
    guest's timer ([`sim_wakeups`][vcpulab.twins.sim_wakeups]), so workloads woken otherwise (IPI,
    spin locks, MSI with polling on) have none: NaN there. ``real`` runs
    passed in are used as they are (traced or not).

    Every argument (and that ``exp`` has a twin) is checked before the real
    trials. Ctrl-C: ``KeyboardInterrupt`` within a second whose ``partial``
    is the list of finished real runs; ``compare(exp, real=e.partial)``
    goes on from them.
    """
    check_type("exp", exp, Experiment)
    check_int("trials", trials, 1, 1000)
    check_int("seeds", seeds, 1, 1000)
    check_bool("trace", trace)
    if load not in ("measured", "one_task", "none"):
        raise ValueError(f"load must be 'measured', 'one_task' or 'none', got {load!r}")
    if real is not None:
        real = check_seq("real", real, "Runs (None: run the real trials)", min_len=1)
        for r in real:
            check_type("real entry", r, Run)
    if cal is not None:
        check_type("cal", cal, Calibration)  # before calibrate() would measure for a falsy one
    cal = cal or calibrate()
    twin(exp, cal)  # an experiment without a twin is refused before its real trials run
    failures: list[str] = []
    if real is None:
        try:
            runs = run_real(exp, trials, failures, cal, trace=trace)
        except KeyboardInterrupt as e:
            # the finished real trials: compare(exp, real=e.partial) resumes from them
            keep_partial(
                e,
                partial_of(e),
                call="twins.compare",
                done=len(partial_of(e) or []),
                total=trials,
                unit="real trials (pass them back as compare(exp, real=e.partial))",
            )
            raise
    else:
        runs = real
    try:
        return _compare_rows(exp, runs, failures, seeds, cal, load, trace)
    except KeyboardInterrupt as e:
        keep_partial(
            e,
            runs,
            call="twins.compare",
            done=len(runs),
            total=len(runs),
            unit="real trials (the twin was interrupted; pass them back as compare(exp, real=e.partial))",
        )
        raise


def _compare_rows(
    exp: Experiment, runs: list[Run], failures: list[str], seeds: int, cal: Calibration, load: str, trace: bool
) -> pl.DataFrame:
    """[`compare`][vcpulab.twins.compare]'s frame from its real runs and the twin's seeds."""
    shares = [r.quality.other_share for r in runs if r.quality.measured]
    share = float(np.mean(shares)) if (load != "none" and shares) else 0.0
    ol = OtherLoad.pooled([OtherLoad(**r.config["other_load"]) for r in runs if r.config.get("other_load")])
    burst = ol.short_burst_ns if ol is not None else None
    gap = start_gap_of(runs)
    if load == "measured" and ol is not None:
        sims = run_sim(exp, cal, seeds, other_load=ol, trace_all=trace, start_gap_ns=gap)
    else:
        sims = run_sim(exp, cal, seeds, other_share=share, trace_all=trace, start_gap_ns=gap)
    rm = [real_metrics(exp, r) for r in runs]
    sm = [sim_metrics(exp, c, s, cal) for c, s in sims]
    dist = sum(1 for r in runs if r.quality.disturbed)
    other = max((r.quality.other_share for r in runs if r.quality.measured), default=float("nan"))
    rows = []
    for m in _metrics_of(exp):
        rv = [x[m] for x in rm if m in x]
        sv = [x[m] for x in sm if m in x]
        r_m, r_lo, r_hi = t_interval(rv)
        s_m, s_lo, s_hi = t_interval(sv)
        fl = FLOORS.get(m, 0.0)
        informative = bool(r_m == r_m and s_m == s_m and (abs(r_m) > fl or abs(s_m) > fl))
        rel = abs(s_m - r_m) / abs(r_m) if (r_m == r_m and s_m == s_m and r_m != 0) else float("nan")
        rows.append(
            dict(
                metric=m,
                unit=METRICS[m][0],
                real=r_m,
                real_lo=r_lo,
                real_hi=r_hi,
                sim=s_m,
                sim_lo=s_lo,
                sim_hi=s_hi,
                rel_err=rel,
                informative=informative,
                ks=float("nan"),
            )
        )
    for d in _DISTS.get(type(exp.workload), ()):
        rs = np.concatenate([real_steal_intervals(r) for r in runs]) if runs else np.empty(0)
        ss = np.concatenate([sim_steal_intervals(s) for _, s in sims if s.trace is not None]) if sims else np.empty(0)
        ks = ks_distance(rs, ss)
        rows.append(
            dict(
                metric=d,
                unit="",
                real=float(rs.mean()) if rs.size else float("nan"),
                real_lo=float("nan"),
                real_hi=float("nan"),
                sim=float(ss.mean()) if ss.size else float("nan"),
                sim_lo=float("nan"),
                sim_hi=float("nan"),
                rel_err=float("nan"),
                informative=bool(rs.size and ss.size),
                ks=ks,
            )
        )
    if trace:
        rows += _trace_rows(runs, [s for _, s in sims])
    return pl.DataFrame(rows).with_columns(
        pl.lit(dist).alias("disturbed_trials"),
        pl.lit(len(runs)).alias("trials"),
        pl.lit(len(failures)).alias("failed_trials"),
        pl.lit(float(other)).alias("other_share_max"),
        pl.lit(share).alias("other_share_twin"),
        pl.lit(burst, dtype=pl.Float64).alias("other_burst_ns"),
        pl.lit(ol.short_fraction if ol is not None else float("nan"), dtype=pl.Float64).alias("other_short_fraction"),
        pl.lit(bool(share > 0 and isinstance(exp.workload, _RUNNABLE))).alias("steal_by_construction"),
    )


def _trace_rows(runs: Sequence[Run], sims: Sequence[sim.Result]) -> list[dict[str, Any]]:
    """compare()'s distribution rows of traced real runs: run slices and
    wake-up latencies (medians and the KS statistic, [`distributions`][vcpulab.twins.distributions])."""
    nan = float("nan")
    real = [r for r in runs if getattr(r, "trace", None) is not None]
    traced = [s for s in sims if s.trace is not None]
    r_sl = np.concatenate([vcpu_slices(r.trace) for r in real]) if real else np.empty(0)  # type: ignore[arg-type]
    r_wk = np.concatenate(
        [
            r.wakeups.filter(pl.col("vcpu") >= 0)["latency_ns"].cast(pl.Float64).to_numpy()
            for r in real
            if r.wakeups is not None
        ]
        or [np.empty(0)]
    )
    s_sl = np.concatenate([vcpu_slices(s.trace) for s in traced]) if traced else np.empty(0)  # type: ignore[arg-type]
    try:
        s_wk = np.concatenate(
            [sim_wakeups(s)["latency_ns"].cast(pl.Float64).to_numpy() for s in traced] or [np.empty(0)]
        )
    except ValueError:  # a guest woken by something other than its timer: no simulated wake-ups to compare
        s_wk = np.empty(0)
    rows = []
    for q, a, b in (("slice_ns", r_sl, s_sl), ("wakeup_latency_ns", r_wk, s_wk)):
        ok = bool(a.size and b.size)
        rows.append(
            dict(
                metric=q,
                unit="ns",
                real=float(np.median(a)) if a.size else nan,
                real_lo=nan,
                real_hi=nan,
                sim=float(np.median(b)) if b.size else nan,
                sim_lo=nan,
                sim_hi=nan,
                rel_err=nan,
                informative=ok,
                ks=ks_distance(a, b) if ok else nan,
            )
        )
    return rows


# ----------------------------------------------------------------------------- grid

#: the factors of a grid cell (columns of [`grid`][vcpulab.twins.grid]'s frames)
FACTORS = ("workload", "kind", "vcpus", "cpus", "hold", "think", "halt_poll_ns", "gap_us", "hz", "scheduler")


def cell_factors(exp: Experiment) -> dict[str, Any]:
    """The grid factors of ``exp`` (NaN-free: -1 where a factor does not apply)."""
    w = exp.workload
    hp = exp.halt_poll_ns
    return {
        "workload": type(w).__name__,
        "kind": getattr(w, "kind", "")
        if isinstance(w, SpinLock) and not isinstance(w, PvSpinLock)
        else ("pv" if isinstance(w, PvSpinLock) else ""),
        "vcpus": exp.vcpus,
        "cpus": len(exp.pcpus),
        "hold": getattr(w, "hold", -1),
        "think": getattr(w, "think", -1),
        "halt_poll_ns": -1 if hp is None else int(hp),
        "gap_us": float(getattr(w, "gap_us", -1.0)),
        "hz": int(getattr(w, "hz", -1)),
        "scheduler": _scheduler_label(exp.scheduler),
    }


def _scheduler_label(s: Any) -> str:
    """``"host"``, ``"round_robin"``, ``"gang"``, or ``"directed_yield:<policy>"``."""
    if s is None:
        return "host"
    pol = getattr(s, "policy", None)
    return f"{s.name}:{sim.policies.label(pol)}" if pol is not None else s.name


def policy_grid(pcpu: int | None = None, duration_s: float = 1.0, vcpus: int = 3) -> list[Experiment]:
    """The policy axis of the twins grid: one ticket ``SpinLock`` VM of
    ``vcpus`` vCPUs on host CPU ``pcpu`` (default: the last this process may
    use) under vcpulab's scheduler, ``round_robin`` and ``directed_yield``
    with each directed-yield policy of the simulator (``no_yield``,
    ``baseline_2011``, ``dy_eligible``, ``upstream``, ``oracle``): the cells
    differ in ``scheduler`` alone, so [`directions`][vcpulab.twins.directions]
    compares every policy with the next (docs/scheduler.md)."""
    from vcpulab import _core, sched

    cpu = max(_core.allowed_cpus()) if pcpu is None else check_int("pcpu", pcpu, 0, 2**16)
    P = sim.policies
    policies = (P.no_yield(), P.baseline_2011(), P.dy_eligible(), P.upstream(), P.oracle())
    scheds = [sched.round_robin(), *(sched.directed_yield(p) for p in policies)]
    w = SpinLock(kind="ticket", hold=50, think=50)
    return [Experiment(w, vcpus, (cpu,), duration_s=duration_s, scheduler=s) for s in scheds]


@renamed_since(PCPUS_RENAMED, _ONE_NAME, cpus="pcpus")
def default_grid(pcpus: Sequence[int] | None = None, small: bool = False, duration_s: float = 1.0) -> list[Experiment]:
    """The grid of the benchmark (``small``: the CI's reduced grid) on the
    host CPUs ``pcpus`` (default: every CPU this process may use; ``cpus=``
    before 2026-12-01, still accepted with a DeprecationWarning).

    SpinLock ticket/TAS × vCPUs 1-8 × 1-2 host CPUs (one CPU each, round
    robin) × hold/think (50/50, 200/20 loop iterations); PvSpinLock 2 and 4
    vCPUs on one CPU; MsiPingPong gap 50/500 µs × max poll 0/200 µs;
    IdleTicks 250/1000 Hz × 1/4 vCPUs × max poll 0/200 µs. One-CPU cells use
    the last usable CPU (MsiPingPong's host driver then runs on the other).

    ``duration_s`` (default 1 s) is each spin-lock and timer run's length. A
    contended ticket run makes only 50-300 acquisitions a second here, and
    its first few ms (vCPUs that have not queued yet let the first one take
    the lock dozens of times) weigh differently in the real start-up and the
    simulator's (every vCPU queued at t = 0): at 0.3 s that start decides the
    count; at 1 s it is diluted (docs/twins.md, "Measured here").
    """
    from vcpulab import _core

    allowed = sorted(_core.allowed_cpus()) if pcpus is None else list(pcpus)
    one = (allowed[-1],)
    two = tuple(allowed[:2]) if len(allowed) >= 2 else None
    out: list[Experiment] = []
    if small:
        for kind in ("tas", "ticket"):
            for n in (1, 3):
                out.append(Experiment(SpinLock(kind=kind, hold=50, think=50), n, one, "one_each", duration_s))  # type: ignore[arg-type]
        out.append(Experiment(_msi(50.0), 1, one, "one_each", MSI_DEADLINE_S, 200_000))
        return out
    for kind in ("tas", "ticket"):
        for hold, think in ((50, 50), (200, 20)):
            for cp in (one, two):
                if cp is None:
                    continue
                for n in (1, 2, 3, 4, 8):
                    if n < len(cp):
                        continue
                    out.append(Experiment(SpinLock(kind=kind, hold=hold, think=think), n, cp, "one_each", duration_s))  # type: ignore[arg-type]
    for n in (2, 4):
        out.append(Experiment(PvSpinLock(hold=50, think=50), n, one, "one_each", duration_s))
    for gap in (50.0, 500.0):
        for hp in (0, 200_000):
            out.append(Experiment(_ipi(gap), 2, two or one, "one_each", MSI_DEADLINE_S, hp))
    for gap in (50.0, 500.0):
        for hp in (0, 200_000):
            out.append(Experiment(_msi(gap), 1, one, "one_each", MSI_DEADLINE_S, hp))
    for hz in (250, 1000):
        for n in (1, 4):
            for hp in (0, 200_000):
                out.append(Experiment(IdleTicks(hz=hz), n, one, "one_each", duration_s, hp))
    return out


#: deadline of the grid's MSI ping-pong cells, s: 200 rounds take 20-120 ms on an
#: idle host, but rounds of 1-20 ms were seen while other tasks held the vCPU's CPU
MSI_DEADLINE_S = 5.0


def _ipi(gap_us: float) -> IpiPingPong:
    """The grid's IPI ping-pong: 200 rounds."""
    return IpiPingPong(rounds=200, gap_us=gap_us)


def _msi(gap_us: float) -> MsiPingPong:
    """The grid's MSI ping-pong: 200 rounds (its metrics are per round)."""
    return MsiPingPong(rounds=200, gap_us=gap_us)


@dataclass
class Grid:
    """What [`grid`][vcpulab.twins.grid] returns.

    ``cells``: one row per (cell, metric): the factors, then [`compare`][vcpulab.twins.compare]'s
    columns. ``directions``: one row per pair of cells that differ in one
    factor and per direction metric: the real and simulated differences, the
    real difference's significance, and whether the signs agree.
    ``no_twin``: experiments without a twin and why. ``calibration``: the
    [`Calibration`][vcpulab.twins.Calibration] used. ``no_real``: cells whose every real trial
    missed its deadline; ``failed``: cells whose comparison raised
    (``"ValueError: …"``), the other cells kept.
    """

    cells: pl.DataFrame
    directions: pl.DataFrame
    no_twin: list[tuple[str, str]]
    calibration: Calibration
    #: cells whose every real trial missed its deadline, with the error
    no_real: list[tuple[str, str]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    #: cells whose comparison raised, with the exception's type and message
    failed: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The agreement numbers (see [`line`][vcpulab.twins.Grid.line])."""
        c = self.cells.filter(pl.col("informative"))
        out: dict[str, Any] = {"cells": self.cells["cell"].n_unique()}
        for m in (
            "acq_per_s",
            "wait_per_acq_us",
            "rtt_median_us",
            "halt_exits_per_s",
            "polled_per_halt",
            "ticks_per_s",
            "ctx_switches_per_vcpu_s",
        ):
            g = c.filter(pl.col("metric") == m)
            out[f"{m}_informative"] = g.height
            out[f"{m}_within_25pct"] = float((g["rel_err"] <= 0.25).mean()) if g.height else float("nan")  # type: ignore[arg-type]
        st = self.cells.filter(pl.col("metric") == "steal_fraction")
        out["steal_cells"] = st.height
        out["steal_within_0.10"] = float(((st["sim"] - st["real"]).abs() <= 0.10).mean()) if st.height else float("nan")  # type: ignore[arg-type]
        out["steal_by_construction"] = int(st["steal_by_construction"].sum()) if st.height else 0
        for key, metric in (
            ("ks_median", "steal_per_10ms"),
            ("ks_slice_median", "slice_ns"),
            ("ks_wakeup_median", "wakeup_latency_ns"),
        ):
            ks = self.cells.filter((pl.col("metric") == metric) & pl.col("ks").is_not_nan())["ks"]
            out[key] = float(ks.median()) if ks.len() else float("nan")  # type: ignore[arg-type]
        d = self.directions.filter(pl.col("significant"))
        out["directions"] = d.height
        out["directions_agree"] = int(d["agree"].sum()) if d.height else 0
        per_cell = self.cells.group_by("cell").agg(
            pl.col("disturbed_trials").first(), pl.col("trials").first(), pl.col("other_share_max").first()
        )
        out["cells_disturbed"] = int((per_cell["disturbed_trials"] > 0).sum())
        out["other_share_median"] = float(per_cell["other_share_max"].median())  # type: ignore[arg-type]
        return out

    def line(self) -> str:
        """One line of agreement numbers (the CI prints it)."""
        s = self.summary()
        pct = lambda x: "n/a" if x != x else f"{x:.0%}"
        return (
            f"twins: {s['cells']} cells; within 25 %: throughput {pct(s['acq_per_s_within_25pct'])} of "
            f"{s['acq_per_s_informative']}, wait {pct(s['wait_per_acq_us_within_25pct'])} of {s['wait_per_acq_us_informative']}, "
            f"MSI/IPI rtt {pct(s['rtt_median_us_within_25pct'])} of {s['rtt_median_us_informative']}, "
            f"halt exits {pct(s['halt_exits_per_s_within_25pct'])} of {s['halt_exits_per_s_informative']}, "
            f"polled share {pct(s['polled_per_halt_within_25pct'])} of {s['polled_per_halt_informative']}; "
            f"steal within 0.10: {pct(s['steal_within_0.10'])} of {s['steal_cells']} "
            f"({s['steal_by_construction']} by construction); directions agree {s['directions_agree']}/{s['directions']}; "
            f"KS median {s['ks_median']:.2f}"
            + (
                f" (run slices {s['ks_slice_median']:.2f}, wake-ups {s['ks_wakeup_median']:.2f})"
                if s["ks_slice_median"] == s["ks_slice_median"]
                else ""
            )
            + f"; real cells disturbed {s['cells_disturbed']}/{s['cells']} "
            f"(other tasks' share median {s['other_share_median']:.0%})"
        )

    def table(self, metrics: Sequence[str] | None = None) -> str:
        """Every cell as a Markdown table: factors, real [CI], sim [CI], relative error, KS."""
        c = self.cells if metrics is None else self.cells.filter(pl.col("metric").is_in(list(metrics)))

        def num(x: float) -> str:
            if x != x:
                return "–"
            return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"

        lines = [
            "| cell | metric | real [95 % CI] | sim [95 % CI] | rel. err | KS | other load |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in c.iter_rows(named=True):
            ci_r = f" [{num(r['real_lo'])}, {num(r['real_hi'])}]" if r["real_lo"] == r["real_lo"] else ""
            ci_s = f" [{num(r['sim_lo'])}, {num(r['sim_hi'])}]" if r["sim_lo"] == r["sim_lo"] else ""
            flag = "" if r["informative"] else " (uninformative)"
            rel = "–" if r["rel_err"] != r["rel_err"] else f"{r['rel_err']:.0%}"
            lines.append(
                f"| {r['cell']} | {r['metric']}{flag} | {num(r['real'])}{ci_r} | {num(r['sim'])}{ci_s} | {rel} | "
                f"{num(r['ks'])} | {r['other_share_max']:.0%} |"
            )
        return "\n".join(lines)


def cell_name(exp: Experiment) -> str:
    """A grid cell's short name for tables, from [`cell_factors`][vcpulab.twins.cell_factors]
    (e.g. ``"tas 50/50 3v/1c"``: 3 vCPUs on 1 host CPU)."""
    f = cell_factors(exp)
    w = f["workload"]
    hp = "" if f["halt_poll_ns"] < 0 else f" poll{f['halt_poll_ns'] // 1000}us"
    if f["scheduler"] != "host":
        hp += f" [{f['scheduler']}]"
    if w in ("SpinLock", "PvSpinLock"):
        return f"{f['kind']} {f['hold']}/{f['think']} {f['vcpus']}v/{f['cpus']}c{hp}"
    if w == "MsiPingPong":
        return f"msi gap{f['gap_us']:g}us{hp}"
    if w == "IpiPingPong":
        return f"ipi gap{f['gap_us']:g}us {f['vcpus']}v/{f['cpus']}c{hp}"
    if w == "IdleTicks":
        return f"ticks {f['hz']}Hz {f['vcpus']}v/{f['cpus']}c{hp}"
    return f"{w} {f['vcpus']}v/{f['cpus']}c{hp}"


#: (factor, metric, expected sign of metric(high level) − metric(low level) or 0 if not asserted)
DIRECTION_METRICS = ("acq_per_vcpu_s", "wait_per_acq_us", "polled_per_halt", "halt_exits_per_s", "rtt_median_us")


def directions(cells: pl.DataFrame) -> pl.DataFrame:
    """Between-cell comparisons: for each pair of cells that differ in exactly
    one factor (adjacent levels) and each metric of [`DIRECTION_METRICS`][vcpulab.twins.DIRECTION_METRICS],
    the real and the simulated difference (high level − low level), whether
    the real one is significant (the trials' 95 % intervals do not overlap,
    or, with one trial, it exceeds 10 % of the larger value) and whether the
    signs agree."""
    c = cells.with_columns(
        pl.when(pl.col("metric") == "acq_per_s")
        .then(pl.lit("acq_per_vcpu_s"))
        .otherwise(pl.col("metric"))
        .alias("metric"),
        *[
            pl.when(pl.col("metric") == "acq_per_s").then(pl.col(x) / pl.col("vcpus")).otherwise(pl.col(x)).alias(x)
            for x in ("real", "real_lo", "real_hi", "sim", "sim_lo", "sim_hi")
        ],
    ).filter(pl.col("metric").is_in(list(DIRECTION_METRICS)))
    rows = []
    recs = c.iter_rows(named=True)
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        by_metric.setdefault(r["metric"], []).append(r)
    present = [f for f in FACTORS if f in cells.columns]
    factors = [f for f in present if f != "workload"]
    for m, rs in by_metric.items():
        for fac in factors:
            groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
            for r in rs:
                key = tuple(r[f] for f in present if f != fac)
                groups.setdefault(key, []).append(r)
            for g in groups.values():
                g = sorted(g, key=lambda r: r[fac])
                for lo, hi in zip(g, g[1:]):
                    dr, ds = hi["real"] - lo["real"], hi["sim"] - lo["sim"]
                    if dr != dr or ds != ds:
                        continue
                    if lo["real_lo"] == lo["real_lo"] and hi["real_lo"] == hi["real_lo"]:
                        sig = hi["real_lo"] > lo["real_hi"] or lo["real_lo"] > hi["real_hi"]
                    else:
                        sig = abs(dr) > 0.10 * max(abs(hi["real"]), abs(lo["real"]), 1e-12)
                    rows.append(
                        dict(
                            metric=m,
                            factor=fac,
                            low=lo["cell"],
                            high=hi["cell"],
                            real_diff=dr,
                            sim_diff=ds,
                            significant=bool(sig),
                            agree=bool(np.sign(dr) == np.sign(ds)),
                        )
                    )
    schema = {
        "metric": pl.Utf8,
        "factor": pl.Utf8,
        "low": pl.Utf8,
        "high": pl.Utf8,
        "real_diff": pl.Float64,
        "sim_diff": pl.Float64,
        "significant": pl.Boolean,
        "agree": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=schema)


def grid(
    experiments: Sequence[Experiment] | None = None,
    trials: int = 3,
    seeds: int = 3,
    cal: Calibration | None = None,
    load: Literal["measured", "one_task", "none"] = "measured",
    progress: bool = False,
    trace: bool = False,
) -> Grid:
    """Run every experiment on real KVM (``trials`` times) and its twin
    (``seeds`` seeds), compare ([`compare`][vcpulab.twins.compare]) and derive the between-cell
    directions. ``experiments`` default: [`default_grid`][vcpulab.twins.default_grid]. ``trace``: the
    real trials are traced and each cell gets its run-slice and wake-up
    latency KS rows ([`compare`][vcpulab.twins.compare]).

    Every argument is checked before the first real trial; a cell on CPUs
    this process may not use is recorded in [`Grid.no_real`][vcpulab.twins.Grid.no_real], and one
    whose comparison fails in [`Grid.failed`][vcpulab.twins.Grid.failed]; the grid goes on. Ctrl-C raises
    ``KeyboardInterrupt`` within about a second; its ``partial`` is the
    [`Grid`][vcpulab.twins.Grid] of the cells that had finished."""
    check_int("trials", trials, 1, 1000)
    check_int("seeds", seeds, 1, 1000)
    check_bool("trace", trace)
    check_bool("progress", progress)
    if load not in ("measured", "one_task", "none"):
        raise ValueError(f"load must be 'measured', 'one_task' or 'none', got {load!r}")
    if cal is not None:
        check_type("cal", cal, Calibration)  # before calibrate() would measure for a falsy one
    exps = check_seq("experiments", experiments, "Experiments") if experiments is not None else None
    for e in exps or ():
        check_type("experiments entry", e, Experiment)
    cal = cal or calibrate()
    if exps is None:
        exps = default_grid()
    frames: list[pl.DataFrame] = []
    no_twin: list[tuple[str, str]] = []
    no_real: list[tuple[str, str]] = []
    failed: list[tuple[str, str]] = []
    config = {"trials": trials, "seeds": seeds, "load": load, "trace": trace}

    def result() -> Grid:
        cells = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
        first = ["cell", *FACTORS]
        cells = cells.select(first + [c for c in cells.columns if c not in first]) if frames else cells
        return Grid(
            cells=cells,
            directions=directions(cells) if frames else pl.DataFrame(),
            no_twin=no_twin,
            calibration=cal,
            no_real=no_real,
            config=config,
            failed=failed,
        )

    try:
        for i, exp in enumerate(exps):
            name = cell_name(exp)
            try:
                twin(exp, cal)
            except ValueError as e:
                no_twin.append((name, str(e)))
                continue
            try:
                exp.check_runnable()
            except ValueError as e:
                no_real.append((name, str(e)))
                continue
            try:
                c = compare(exp, trials=trials, seeds=seeds, cal=cal, load=load, trace=trace)
            except TimeoutError as e:
                no_real.append((name, str(e)))
                if progress:
                    print(f"[{i + 1}/{len(exps)}] {name}: every real trial missed its deadline: {e}", flush=True)
                continue
            except (ValueError, RuntimeError, OSError) as e:
                failed.append((name, f"{type(e).__name__}: {e}"))
                if progress:
                    print(f"[{i + 1}/{len(exps)}] {name}: failed: {type(e).__name__}: {e}", flush=True)
                continue
            f = cell_factors(exp)
            frames.append(c.with_columns(pl.lit(name).alias("cell"), *[pl.lit(v).alias(k) for k, v in f.items()]))
            if progress:
                print(f"[{i + 1}/{len(exps)}] {name}: other tasks {float(c['other_share_max'][0]):.0%}", flush=True)
    except KeyboardInterrupt as e:
        keep_partial(e, result(), call="twins.grid", done=len(frames), total=len(exps), unit="cells")
        raise
    return result()


# -------------------------------------------------------------------- distributions

#: columns of a real run's trace (``Run.trace``; their one home is
#: ``vcpulab.tracing.TRACE_SCHEMA``); [`sim_trace_frames`][vcpulab.twins.sim_trace_frames] gives a
#: simulated run the same trace and wake-up frames
TRACE_COLUMNS = tuple(tracing.TRACE_SCHEMA)
#: columns of a run's wake-ups (``Run.wakeups``, and [`sim_wakeups`][vcpulab.twins.sim_wakeups] for a simulated run;
#: ``vcpulab.tracing.WAKEUPS_SCHEMA``)
WAKEUP_COLUMNS = tuple(tracing.WAKEUPS_SCHEMA)


def _sleep_phase(res: sim.Result) -> tuple[int, bool] | None:
    """(ns, periodic) of the twin's one Sleep phase, or None when the
    simulated guest blocks in anything else (or in more than one way)."""
    vms = res.config.vms
    if len(vms) != 1:
        return None
    ph = vms[0].workload.phases
    sleeps = [p for p in ph if isinstance(p, sim.Sleep)]
    blocking = [p for p in ph if isinstance(p, (sim.Recv, sim.Barrier))]
    if len(sleeps) != 1 or blocking or sleeps[0].dist != "fixed" or sleeps[0].prob != 1.0:
        return None
    return int(sleeps[0].ns), bool(sleeps[0].periodic)


def sim_wakeups(res: sim.Result) -> pl.DataFrame:
    """The wake-ups of a simulated run's vCPUs in the schema of a real run's
    ``Run.wakeups`` ([`WAKEUP_COLUMNS`][vcpulab.twins.WAKEUP_COLUMNS]; ``tid`` is -1), derived from its
    trace (``trace=True``) and its guest's timer.

    The simulator's trace records when each vCPU ran, not when it was woken.
    A vCPU interval that ended because the vCPU blocked in a halt (``why`` =
    ``"halt"``) at ``h`` was woken by its guest's timer at:

    * ``Sleep(ns, periodic=True)`` (the twin of ``IdleTicks``): the first
      multiple of ``ns`` after ``h`` (the timer's grid; a grid point between
      the sleep's start and ``h`` would have ended the halt-poll loop instead);
    * ``Sleep(ns)`` (``MsiPingPong``): ``h + ns``, exact only when the vCPU
      blocked at once, i.e. with halt polling off; with polling on a
      ``ValueError`` says so.

    ``run_ns`` is the start of the vCPU's next interval, ``latency_ns`` the
    difference (the simulator's wake-up latencies, ``Host.wakeup_ipi_ns`` and
    idle-state exits, plus any wait for the CPU). Workloads whose vCPUs never
    block (spin locks) have no wake-ups: an empty frame. Other blocking
    phases (``Recv``, ``Barrier``) raise ``ValueError``: their wake-up times
    are not in the trace.
    """
    if res.trace is None:
        raise ValueError("sim_wakeups needs a run with trace=True")
    schema = {
        "vm": pl.Int64,
        "vcpu": pl.Int64,
        "tid": pl.Int64,
        "wake_ns": pl.Int64,
        "run_ns": pl.Int64,
        "latency_ns": pl.Int64,
    }
    t = res.trace.filter(pl.col("vcpu") >= 0).sort(["vm", "vcpu", "start_ns"])
    if t.filter(pl.col("why") == "halt").height == 0:
        return pl.DataFrame(schema=schema)
    sp = _sleep_phase(res)
    if sp is None:
        raise ValueError(
            "sim_wakeups derives wake-ups from a guest whose only blocking phase is one fixed Sleep; "
            "this run's guest blocks otherwise (Recv, Barrier, several or random sleeps)"
        )
    ns, periodic = sp
    if not periodic and res.config.vms[0].halt_poll.policy != "off":
        raise ValueError(
            "sim_wakeups: with a non-periodic Sleep the wake time is exact only with halt polling off "
            f"(this run's policy is {res.config.vms[0].halt_poll.policy!r})"
        )
    rows: dict[str, list[int]] = {k: [] for k in schema}
    for (vm, vcpu), g in t.group_by(["vm", "vcpu"], maintain_order=True):
        st, en, why = g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), g["why"].to_list()
        for i in range(len(st) - 1):
            if why[i] != "halt":
                continue
            h = int(en[i])
            wake = (h // ns + 1) * ns if periodic else h + ns
            run = int(st[i + 1])
            if run < wake:  # woken by something other than the timer
                continue
            for k, v in zip(schema, (int(vm), int(vcpu), -1, wake, run, run - wake)):  # type: ignore[call-overload]
                rows[k].append(v)
    return pl.DataFrame(rows, schema=schema)


def sim_trace_frames(res: sim.Result) -> dict[str, pl.DataFrame]:
    """A simulated run as a real run's trace frames: ``{"trace": …, "wakeups": …}``
    with [`TRACE_COLUMNS`][vcpulab.twins.TRACE_COLUMNS] (``tid`` -1, ``comm`` ``"CPU n/KVM"`` for vCPUs
    as vcpulab names its vCPU threads, ``"other"`` for host tasks) and
    [`WAKEUP_COLUMNS`][vcpulab.twins.WAKEUP_COLUMNS]. Tests and notebooks use it to exercise
    [`distributions`][vcpulab.twins.distributions] without a real trace."""
    if res.trace is None:
        raise ValueError("sim_trace_frames needs a run with trace=True")
    tr = res.trace.select(
        pl.col("pcpu").cast(pl.Int64),
        pl.col("start_ns").cast(pl.Int64),
        pl.col("end_ns").cast(pl.Int64),
        pl.col("vm").cast(pl.Int64),
        pl.col("vcpu").cast(pl.Int64),
        pl.lit(-1, dtype=pl.Int64).alias("tid"),
        pl.when(pl.col("vcpu") >= 0)
        .then(pl.format("CPU {}/KVM", pl.col("vcpu")))
        .otherwise(pl.lit("other"))
        .alias("comm"),
    )
    return {"trace": tr, "wakeups": sim_wakeups(res)}


def _frames_of(x: Any) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """(trace, wakeups) of a Run (attributes), a mapping, or a (trace, wakeups) pair."""
    if isinstance(x, Mapping):
        return x.get("trace"), x.get("wakeups")
    if isinstance(x, tuple) and len(x) == 2:
        return x[0], x[1]
    return getattr(x, "trace", None), getattr(x, "wakeups", None)


def _check_cols(df: pl.DataFrame, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{what} lacks the columns {missing} (has {df.columns})")


def vcpu_slices(trace: pl.DataFrame) -> np.ndarray:
    """Run-slice lengths of the vCPU threads, ns: ``end_ns − start_ns`` of every
    trace row with ``vcpu >= 0`` (a real trace's or [`sim_trace_frames`][vcpulab.twins.sim_trace_frames]')."""
    _check_cols(trace, ("start_ns", "end_ns", "vcpu"), "trace")
    t = trace.filter(pl.col("vcpu") >= 0)
    return (t["end_ns"] - t["start_ns"]).cast(pl.Float64).to_numpy()


@overload
def distributions(
    real_frames: Any, sim_result: sim.Result | Sequence[sim.Result], plot: Literal[False] = ...
) -> pl.DataFrame: ...
@overload
def distributions(
    real_frames: Any, sim_result: sim.Result | Sequence[sim.Result], plot: Literal[True]
) -> tuple[pl.DataFrame, Any]: ...
def distributions(
    real_frames: Any,
    sim_result: sim.Result | Sequence[sim.Result],
    plot: bool = False,
) -> pl.DataFrame | tuple[pl.DataFrame, Any]:
    """Real vs simulated distributions, two-sample Kolmogorov-Smirnov per quantity.

    ``real_frames``: a real [`Run`][vcpulab.experiment.Run] with ``trace``
    ([`TRACE_COLUMNS`][vcpulab.twins.TRACE_COLUMNS]) and ``wakeups`` ([`WAKEUP_COLUMNS`][vcpulab.twins.WAKEUP_COLUMNS]) frames,
    a mapping ``{"trace": …, "wakeups": …}``, a (trace, wakeups) pair, or a
    list of these (trials, pooled). ``sim_result``: one or several (seeds,
    pooled) simulated runs with ``trace=True``.

    Quantities: ``slice_ns`` (every vCPU run slice, [`vcpu_slices`][vcpulab.twins.vcpu_slices]) and
    ``wakeup_latency_ns`` (real ``latency_ns``; simulated from
    [`sim_wakeups`][vcpulab.twins.sim_wakeups]). One row each: ``quantity``, ``n_real``, ``n_sim``,
    the medians and 90th percentiles of both sides (ns), ``ks`` (the
    two-sample KS statistic, ``scipy.stats.ks_2samp``) and ``p_value``
    (its exact/asymptotic p-value; NaN with an empty side). A quantity with
    no real frame (``wakeups`` None) or no sample on either side gets NaN.
    ``plot=True`` returns ``(frame, matplotlib Figure)``: both quantities'
    empirical distribution functions, real and simulated, log-scaled time.
    """
    from scipy import stats

    reals = list(real_frames) if isinstance(real_frames, list) else [real_frames]
    sims = [sim_result] if isinstance(sim_result, sim.Result) else list(sim_result)
    if not reals or not sims:
        raise ValueError("distributions needs at least one real and one simulated run")
    samples: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    r_sl, r_wk = [], []
    for rf in reals:
        tr, wk = _frames_of(rf)
        if tr is not None:
            _check_cols(tr, TRACE_COLUMNS, "real trace")
            r_sl.append(vcpu_slices(tr))
        if wk is not None:
            _check_cols(wk, WAKEUP_COLUMNS, "real wakeups")
            w = wk.filter(pl.col("vcpu") >= 0) if "vcpu" in wk.columns else wk
            r_wk.append(w["latency_ns"].cast(pl.Float64).to_numpy())
    s_sl, s_wk = [], []
    for s in sims:
        f = sim_trace_frames(s)
        s_sl.append(vcpu_slices(f["trace"]))
        s_wk.append(f["wakeups"]["latency_ns"].cast(pl.Float64).to_numpy())
    cat = lambda xs: np.concatenate(xs) if xs else np.empty(0)
    samples["slice_ns"] = (cat(r_sl), cat(s_sl))
    samples["wakeup_latency_ns"] = (cat(r_wk), cat(s_wk))
    rows = []
    for q, (a, b) in samples.items():

        def pct(x: np.ndarray, p: float) -> float:
            return float(np.percentile(x, p)) if x.size else float("nan")

        if a.size and b.size:
            res = stats.ks_2samp(a, b)
            ks, pv = float(res.statistic), float(res.pvalue)
        else:
            ks = pv = float("nan")
        rows.append(
            dict(
                quantity=q,
                n_real=int(a.size),
                n_sim=int(b.size),
                real_median_ns=pct(a, 50),
                sim_median_ns=pct(b, 50),
                real_p90_ns=pct(a, 90),
                sim_p90_ns=pct(b, 90),
                ks=ks,
                p_value=pv,
            )
        )
    frame = pl.DataFrame(rows)
    if not plot:
        return frame
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, (q, (a, b)) in zip(axes, samples.items()):
        for x, lab, st in ((a, "real", "-"), (b, "twin", "--")):
            if x.size:
                xs = np.sort(x) / 1e3
                ax.step(xs, np.arange(1, xs.size + 1) / xs.size, st, where="post", label=f"{lab} (n={x.size})")
        row = frame.filter(pl.col("quantity") == q).row(0, named=True)
        ks_txt = "–" if row["ks"] != row["ks"] else f"{row['ks']:.2f}"
        ax.set(xscale="log", xlabel=f"{q.removesuffix('_ns')} (µs)", ylabel="fraction ≤ x", title=f"{q}: KS {ks_txt}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return frame, fig
