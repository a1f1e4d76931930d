"""The twin: the simulated configuration of a real experiment ([`twin`][vcpulab.twins.twin]), the host
it models ([`twin_machine_cpus`][vcpulab.twins.twin_machine_cpus]), the measured host load as the
simulator's noise and background ([`host_load_for`][vcpulab.twins.host_load_for],
[`background_for`][vcpulab.twins.background_for]), the vCPU threads' start
([`start_gap_of`][vcpulab.twins.start_gap_of]) and the twin of a run under vcpulab's scheduler."""

from __future__ import annotations

import math
import numbers
import os
import warnings
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import numpy as np
import polars as pl

from vcpulab import sim
from vcpulab._checks import check_bool, check_float, check_int, check_type
from vcpulab.experiment import IdleTicks, IpiPingPong, MsiPingPong, PvSpinLock, Run, Spin, SpinLock, WakePlacement
from vcpulab.twins._calibration import IPI_OUTSIDE_INSNS, calibrate, ipi_pair_median
from vcpulab.twins._experiment import Experiment
from vcpulab.twins._guest import (
    HALT_BRACKET_INSNS,
    IRQ_STUB_INSNS,
    PV_SPIN_ITER_INSNS_NO_WINDOW,
    WAKE_POLL_ITER_INSNS,
    guest_path,
)
from vcpulab.twins._load import OtherLoad
from vcpulab.twins._speed import check_host_speed, host_speed_of
from vcpulab.twins._values import Calibration


def _host_field(name: str) -> bool:
    return name in {f.name for f in fields(sim.Host)}


#: always-runnable workloads (their vCPU threads compete for the CPU all the time)
_RUNNABLE = (SpinLock, Spin)


def _competing_vcpus(exp: Experiment) -> float:
    """The vCPU threads per host CPU that competed with other tasks in the
    kernel's fair scheduler: all of a run's ``vcpus / len(pcpus)`` under the
    host's scheduler, one under vcpulab's (only a run token's holder is
    runnable there; the others sleep until they get one)."""
    return 1.0 if exp.scheduler is not None else exp.vcpus / len(exp.pcpus)


def background_for(exp: Experiment, other_share: float, burst_ns: float | None = None) -> sim.Background:
    """The simulated host load that took ``other_share`` (a fraction of the run's
    CPU time, measured by [`vcpulab.quality.Quality`][]) from a real run.

    Other work is modelled as one task per host CPU whose CPU bursts last
    ``burst_ns`` (default 100 ms: CPU-bound compilers and test suites,
    assumption; [`compare`][vcpulab.twins.compare] keeps the default and reports the other
    tasks' measured mean burst beside it, see its comment):

    * always-runnable workloads (SpinLock, Spin): the run's ``n`` vCPU
      threads per CPU (one under vcpulab's scheduler: the run token's
      holder) competed with the others all the time, so the others
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
    n = _competing_vcpus(exp)
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
    n = _competing_vcpus(exp)
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


def vcpu_start_of(runs: Sequence[Run]) -> float | None:
    """The measured start of a real vCPU under vcpulab's scheduler, ns: its
    program's start (enabling its LAPIC, its first instructions and their
    first-touch faults, emulated here) and its few instructions to its first
    halt (with a ``WakePlacement``'s ``poll > 0``, a worker's mailbox poll
    too, which [`twin`][vcpulab.twins.twin] takes out again). Per run, the shortest first hold of a token among its vCPUs whose
    first hold ends in a halt (from ``Run.schedule``: the vCPU's first grant
    to its first release, ``why == "halt"``); the median over the runs. None
    for runs without a decision log (under the host's scheduler the start
    is not observed) or with no vCPU that halted first.

    Measured here (2-CPU AMD EPYC, kvm_pvm, 2026-12-06): 127-218 µs per run
    (``WakePlacement`` under ``round_robin``, 8 runs); a vCPU whose first
    hold does more (the waker, spinning until every worker is idle) held it
    up to 3.3 ms. Used as the twin's ``Guest.vcpu_start_ns``."""
    starts: list[float] = []
    for r in runs:
        d = getattr(r, "schedule", None)
        if d is None or d.height == 0:
            continue
        d = d.sort("t_ns", maintain_order=True)
        best: float | None = None
        for (vm, vcpu), g in d.filter(pl.col("in_vcpu") >= 0).group_by(["in_vm", "in_vcpu"]):
            t0 = int(g["t_ns"].min())  # type: ignore[arg-type]
            out = d.filter((pl.col("out_vm") == vm) & (pl.col("out_vcpu") == vcpu) & (pl.col("t_ns") >= t0)).head(1)
            if out.height and out["why"][0] == "halt":
                hold = float(out["t_ns"][0] - t0)
                best = hold if best is None else min(best, hold)
        if best is not None:
            starts.append(best)
    return float(np.median(starts)) if starts else None


def _measured(cal: Calibration, key: str) -> float:
    """The calibration's value ``key``, 0 where it has none (calibrations
    made before the value existed, the reference calibration among them) or
    did not measure it (NaN, or not positive)."""
    x = float(cal[key]) if key in cal.values else 0.0
    return x if math.isfinite(x) and x > 0 else 0.0


def _halt_wake_kw(cal: Calibration, halt_wake: float) -> dict[str, Any]:
    """``Pv.halt_wake_ns`` / ``halt_wake_jitter`` of a twin: the measured
    cost, drawn log-normal with the calibration's ``halt_wake_spread`` where
    it has one, its median set so that two draws keep the measured median
    round trip (``halt_wake_ns`` x 2 / [`ipi_pair_median`][vcpulab.twins.ipi_pair_median];
    the mean cost is then a little above the measured one: 1.07x at a
    spread of 0.5)."""
    if halt_wake <= 0:
        return {"halt_wake_ns": 0}
    spread = min(_measured(cal, "halt_wake_spread"), 1.0)
    if spread == 0:
        return {"halt_wake_ns": int(round(halt_wake))}
    return {"halt_wake_ns": int(round(halt_wake * 2 / ipi_pair_median(spread))), "halt_wake_jitter": spread}


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
    vcpu_start_ns: float | None = None,
    host_speed: bool | str = True,
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
      = the measured blocked-halt wake-up latency where the host model has it;
      with a calibration that measured ``halt_wake_ns`` (the CPU a blocked
      halt costs beyond a polled one), the twin charges it when a vCPU is
      back from a blocked halt (``Pv.halt_wake_ns``) and takes it out of that
      latency.
    * VM: no PLE (this host has no VMX/SVM, so no pause-loop exits), no
      directed-yield policy, steal time on with a ``preempted`` byte KVM never
      writes (``Pv.preempted_byte="never"``: this host's kvm_pvm leaves it
      clear; under vcpulab's schedulers it is set while a runnable vCPU holds
      no token, as the real scheduler does), no PV sched-yield, no posted
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

    * Host speed: with ``host_speed`` (default True) and a calibration that
      measured it ([`speed_probe`][vcpulab.twins.speed_probe]: ``speed_*``), every CPU of the twin
      moves between the measured fast and slow states
      ([`HostSpeed`][vcpulab.sim.HostSpeed]), the emulated instructions' costs being the
      calibration's at the probe's median speed, and the state stretching the
      host's own paths on the CPU as well (``host_paths``: wake-up latency, a
      blocked halt's return); ``"work"``: the guest's work only; False: one
      speed. With it too, a measured ``corun_speed_pct`` below 100 on a
      machine of 2-8 CPUs: the CPUs as the threads of one core
      (``Host.threads_per_core`` = the machine's CPUs, ``smt_speed_pct`` =
      it), a vCPU's work slowed while any other CPU runs something.
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
      RUN_TO_PARITY on, the default). Under vcpulab's schedulers each vCPU
      first runs ``vcpu_start_ns`` of guest work holding its token
      (``Guest.vcpu_start_ns``: the real program's start, measured on the
      real runs by [`vcpu_start_of`][vcpulab.twins.vcpu_start_of]; a Run
      passed as ``exp`` brings its own; None or 0: none; a ``WakePlacement``
      with ``poll > 0`` less the workers' mailbox poll, which the measured
      first hold includes and the twin's workers run as their idle poll). Under the host's
      scheduler the start is not observed and the twin has none.

    IpiPingPong → thread 0 ``Compute(gap + outside path), Send, Recv``, thread
      1 ``Recv, Compute(the round's timed instructions), Send``
      (``Workload.thread0_phases``), ``rounds`` iterations, ``wakeup_ipi_ns``
      = the measured IPI wake-up (``ipi_wake_ns``); where the calibration has
      ``ipi_wake_spread`` each wake-up is drawn log-normal with that log
      standard deviation (``Host.wakeup_dist="lognormal"``), its median
      ``ipi_wake_ns`` x 2 / [`ipi_pair_median`][vcpulab.twins.ipi_pair_median]
      so that two keep the measured median round trip (fixed where the twin
      charges ``halt_wake_ns``: the spread then lies in that CPU time,
      which the simulator charges fixed). Simplification: the real
      gap is RDTSC (wall) time, the twin's is CPU time (a vCPU preempted in
      its gap lengthens the twin's round, not its round trip).

    WakePlacement → thread 0, the waker, bound to vCPU 0
      (``Workload.thread0_bound``), ``Compute(waker path), Send,
      Compute(its instructions after the IPI), Recv``, starting once every
      other vCPU has started and is idle (``Guest.vcpu0_waits_for_starts``:
      the real waker waits for every worker's idle flag); one worker thread
      ``Recv, Compute(worker path + work loop), Send, Compute(after the
      IPI)`` (with ``pv_exits`` each halt bracket adds ``uexit_ns``) (one item
      at a time: one worker is busy at a time, and the guest's placement
      chooses its vCPU at each wake-up, from the previous one, by
      ``Pv.placement`` = the rule under vcpulab's schedulers, which write
      ``is_idle``; ``"available_idle"`` under the host's, whose KVM never
      writes it); ``wakeup_ipi_ns`` = the measured IPI
      wake-up, drawn as ``IpiPingPong``'s. Instructions from [`guest_path`][vcpulab.twins.guest_path].
      Under vcpulab's schedulers a side woken from its halt runs its
      interrupt handler, ``cli`` and its wake bracket without a token, on the
      CPU whose token it last held, then exits to ask for one
      (``Host.token_wake_exit_ns`` = those 20 instructions x ``path_insn_ns``
      + ``uexit_ns``, taken out of the phase after the wake-up), as the real
      one does; a halting side gives its token up at its halt bracket, before
      KVM polls (``Host.token_halt_bracket``). Simplifications: ``is_idle``
      is the scheduler's state at the choice (the CPU of the vCPU's last
      token has no holder, what the real scheduler publishes), not the byte
      it last wrote; ``rounds > 0`` and the ``*_from_host`` bytes have no twin. With
      ``poll > 0`` the workers' vCPUs idle-poll (``Pv.guest_idle_poll_ns`` =
      ``poll`` × [`wake_poll_iter_ns`][vcpulab.twins.wake_poll_iter_ns], ``Pv.guest_idle_poll_vcpus`` = the
      workers; the waker halts at once), so an item placed on a polling
      worker runs without its wake-up; simplifications: the twin's poll starts
      after the halt path's instructions, which an item found while polling
      runs too (about 10 instructions more than the real hit; under
      vcpulab's schedulers a hit also skips the 20 wake-path instructions
      that ``token_wake_exit_ns`` stands for, of which the real hit runs the
      16 of the interrupt handler: about as many fewer), the poll sees
      the item at once (the real one at its next check, ~half an iteration
      later). The poll is a number of checks, as the real one
      (``Pv.guest_idle_poll_limit = "checks"``): a worker switched out or
      interrupted while polling goes on with the checks it has left.

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
    if vcpu_start_ns is not None:
        vcpu_start_ns = check_float("vcpu_start_ns", vcpu_start_ns, 0.0, 1e9, unit="ns")
    check_int("seed", seed, 0, 2**64 - 1)
    check_bool("trace", trace)
    check_host_speed(host_speed)
    if isinstance(exp, Run):
        if other_share is None and exp.quality.measured:
            # a measured share is capped at 0.99: a twin needs some CPU left for its vCPUs
            other_share = min(exp.quality.other_share, 0.99)
        if start_gap_ns is None:
            start_gap_ns = start_gap_of([exp])
        if vcpu_start_ns is None:
            vcpu_start_ns = vcpu_start_of([exp])
        exp = Experiment.from_run(exp)
    check_type("exp", exp, Experiment)
    if cal is not None:
        check_type("cal", cal, Calibration)
    cal = cal or calibrate()
    if "machine_cpus" in cal.values and max(exp.pcpus) >= int(cal["machine_cpus"]):
        m = int(cal["machine_cpus"])
        warnings.warn(
            f"twins.twin: the experiment's pcpus {tuple(exp.pcpus)} name host CPUs the calibrated machine "
            f"does not have (it has {m}: 0-{m - 1}), so the calibration is of another machine; the twin "
            f"models {len(exp.pcpus)} of its CPUs, by count (calibrate this host for a twin of its runs)",
            UserWarning,
            stacklevel=2,
        )
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
    wake_exit_ns = 0.0  # Host.token_wake_exit_ns of a WakePlacement under vcpulab's scheduler
    if isinstance(w, PvSpinLock) and w.preempted_from_host:
        raise ValueError(
            "PvSpinLock with preempted_from_host has no twin (the host-forced preempted byte is not modelled)"
        )
    if isinstance(w, WakePlacement) and (w.forced_bytes or w.rounds):
        raise ValueError(
            "WakePlacement with rounds > 0 or *_from_host has no twin (the host-forced bytes are not modelled; "
            "the twin runs for the duration)"
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
        thread0: tuple[Any, ...] = (
            sim.Compute(max(int(round(w.gap_us * 1000 + IPI_OUTSIDE_INSNS * a)), 1), mode="kernel"),
            sim.Send(1),
            sim.Recv(),
        )
        phases = (sim.Recv(), sim.Compute(max(int(round(inside * a)), 1), mode="kernel"), sim.Send(1))
    elif isinstance(w, WakePlacement):
        pv_exits = exp.scheduler is not None
        p = guest_path(w, exp.vcpus, pv_exits=pv_exits)
        # each side's instructions after its IPI run beside the other's wake-up, and with
        # pv_exits each halt's two brackets exit to vcpulab's scheduler (uexit_ns each): the
        # halt's before the hlt, the wake-up's before the next item's work
        exit_ns = cal["uexit_ns"] if pv_exits else 0.0
        if pv_exits and _host_field("token_wake_exit_ns"):
            # a side woken from its halt runs its interrupt handler, the cli and the wake
            # bracket without a token, then exits to ask for one (Host.token_wake_exit_ns):
            # those instructions and that exit leave the phase after its wake-up
            wake_exit_ns = (IRQ_STUB_INSNS + 1 + HALT_BRACKET_INSNS) * a + exit_ns
        else:
            wake_exit_ns = 0.0

        def k(x: float) -> Any:
            return sim.Compute(max(int(round(x)), 1), mode="kernel")

        w0, w1 = p["waker_after_ipi"], p["worker_after_ipi"]
        thread0 = (
            k((p["waker_path"] - w0) * a + exit_ns - wake_exit_ns),
            sim.Send(1),
            k(w0 * a + exit_ns),
            sim.Recv(),
        )
        main_ns = (p["worker_path"] - w1) * a + p["work_loop"] * b + exit_ns - wake_exit_ns
        phases = (sim.Recv(), k(main_ns), sim.Send(1), k(w1 * a + exit_ns))
        name = f"{name}:{w.rule}"
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
        n_pcpus=machine,
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
            if _host_field("start_order"):
                # the VMM creates them in index order; their first runs are jittered
                hkw["start_order"] = "created"
    if machine > n_cpus:
        # vCPU i on the run's CPU i mod n (the real placement), the rest of
        # the machine left to the VMM thread and the host's other tasks
        hkw.update(affinity="round_robin", vcpu_pcpus=tuple(range(n_cpus)))
    if other_load is not None:
        hkw["background"], hkw["noise"] = host_load_for(exp, other_load, machine_cpus=machine)
    elif other_share:
        hkw["background"] = background_for(exp, float(other_share), other_burst_ns)
    # a blocked halt's CPU beyond a polled one (its switch to idle and back), charged when the
    # vCPU is back from the block (Pv.halt_wake_ns) and taken out of the wake-up latency that
    # held it
    halt_wake = _measured(cal, "halt_wake_ns")
    if _host_field("wakeup_ipi_ns"):
        ipi = isinstance(w, (IpiPingPong, WakePlacement))
        wake = max((cal["ipi_wake_ns"] if ipi else cal["wake_block_ns"]) - halt_wake, 0.0)
        hkw["wakeup_ipi_ns"] = int(wake)
        spread = _measured(cal, "ipi_wake_spread")
        # with the block's CPU charged, what is left to draw is the scheduler's few-µs latency; the
        # round trips' spread lies mostly in that CPU time, which the simulator charges fixed
        if ipi and spread > 0 and halt_wake == 0 and _host_field("wakeup_dist"):
            # each IPI wake-up drawn as the calibration's round trips spread (log-normal, a right
            # tail), its median set so that two of them keep the measured median round trip
            hkw.update(
                wakeup_dist="lognormal",
                wakeup_jitter=min(spread, 1.0),
                wakeup_ipi_ns=int(round(wake * 2 / ipi_pair_median(spread))),
            )
    ple, policy = sim.Ple.off(), sim.policies.no_yield()
    if exp.scheduler is not None:
        hkw, ple, policy = _scheduled_twin(exp, cal, hkw)
        if wake_exit_ns > 0:
            hkw["token_wake_exit_ns"] = max(int(round(wake_exit_ns)), 1)
    wkw: dict[str, Any] = dict(phases=phases, name=name, iterations=int(getattr(w, "iterations", 0)))
    if isinstance(w, IpiPingPong):
        # the real run ends after its rounds: so does the twin (each thread one iteration per round)
        wkw.update(thread0_phases=thread0, iterations=int(w.rounds))
    pv_kw: dict[str, Any] = {}
    threads = 0
    if isinstance(w, WakePlacement):
        # the waker stays on vCPU 0; the one worker thread goes where the rule sends it
        wkw.update(thread0_phases=thread0, thread0_bound=True, iterations=0)
        # upstream KVM never writes is_idle (the proposal was not merged): under the host's
        # scheduler the rule's first pass finds no byte set, and both rules choose alike
        pv_kw["placement"] = w.rule if exp.scheduler is not None else "available_idle"
        if w.poll > 0:
            # the workers poll their mailbox before they halt (the waker does not): a guest
            # idle poll on the workers' vCPUs, as long as the poll's failed checks
            pv_kw["guest_idle_poll_ns"] = max(int(round(w.poll * wake_poll_iter_ns(cal))), 1)
            pv_kw["guest_idle_poll_vcpus"] = tuple(range(1, exp.vcpus))
            # the real poll counts its checks down: time switched out or in a handler is not polled
            pv_kw["guest_idle_poll_limit"] = "checks"
        threads = 2
    guest_kw: dict[str, Any] = {}
    if vcpu_start_ns is not None and isinstance(w, WakePlacement) and w.poll > 0:
        # the measured start (vcpu_start_of: a worker's first token hold, up to its first halt)
        # holds the worker's mailbox poll before that halt, which the twin's workers run as their
        # guest idle poll: without it the twin polled twice before its first halt, and a token
        # slice could end inside the second (a worker preempted while idle, the first item placed
        # on the other worker: the twin's fast mode, real 334 against twin 2,246 items/s)
        vcpu_start_ns = max(vcpu_start_ns - pv_kw["guest_idle_poll_ns"], 0.0)
    if vcpu_start_ns is not None and vcpu_start_ns >= 1 and exp.scheduler is not None:
        # every vCPU runs its program's start before its guest scheduler picks a thread
        guest_kw["vcpu_start_ns"] = int(round(vcpu_start_ns))
    if isinstance(w, WakePlacement):
        # the waker hands out its first item once every worker is idle (the real waker then waits
        # ~0.3-0.6 ms more for the workers' halt brackets, once per run: not modelled)
        guest_kw["vcpu0_waits_for_starts"] = True
    vm = sim.Vm(
        vcpus=exp.vcpus,
        threads=threads,
        guest=sim.Guest(**guest_kw),
        workload=sim.Workload(**wkw),
        ple=ple,
        policy=policy,
        pv=sim.Pv(
            steal_time=True,
            # this host's KVM (kvm_pvm) never writes the byte; vcpulab's schedulers do
            preempted_byte="never",
            sched_yield=False,
            apicv=False,
            halt_exit_ns=max(int(round(a)), 0),
            **_halt_wake_kw(cal, halt_wake),
            **pv_kw,
        ),
        halt_poll=hp,
    )
    if host_speed and _host_field("speed"):
        speed = host_speed_of(cal.values, host_paths=host_speed is True)
        if speed.is_on:
            # the host's CPUs move between a fast and a slow state (twins.speed_probe)
            hkw["speed"] = speed
        corun = float(cal["corun_speed_pct"]) if "corun_speed_pct" in cal.values else 100.0
        n_host = int(hkw["n_pcpus"])  # the machine, or the run's CPUs where the twin models only those
        if math.isfinite(corun) and corun < 99.5 and 2 <= n_host <= 8:
            # the machine's CPUs slow each other while they run together (twins.speed_probe's
            # corun_speed_pct): as the threads of one core, a vCPU's work at that speed while any
            # other CPU runs something
            hkw.update(threads_per_core=n_host, smt_speed_pct=max(int(round(corun)), 10))
    return sim.Config(host=sim.Host(**hkw), vms=(vm,), duration_ns=int(exp.duration_s * 1e9), seed=seed, trace=trace)


def wake_poll_iter_ns(cal: Calibration) -> float:
    """The time of one failed mailbox check of a ``WakePlacement`` worker's
    poll loop ([`WAKE_POLL_ITER_INSNS`][vcpulab.twins.WAKE_POLL_ITER_INSNS] = 7 instructions, one of them a
    PAUSE): the calibration's measured ``wake_poll_iter_ns``. Calibrations
    without it (older ones, or a disturbed measurement: NaN) derive it from
    the measured failed spin iteration (``spin_iter_ns``: measured without a
    spin window, [`PV_SPIN_ITER_INSNS_NO_WINDOW`][vcpulab.twins.PV_SPIN_ITER_INSNS_NO_WINDOW] = 9 instructions
    with one PAUSE) less the 2 instructions more it has at ``loop_insn_ns``
    each, never below 7 × ``loop_insn_ns``, or else count 7 × ``loop_insn_ns``.
    Until 0.3.13 it took 4 instructions off, counting the iteration as 11,
    and read low (7.3 µs against 8.7 µs measured in one calibration here). The reference
    calibration vcpulab ships predates the measurement and derives it."""
    if "wake_poll_iter_ns" in cal.values:
        measured = cal["wake_poll_iter_ns"]
        if measured == measured and measured > 0:
            return float(measured)
    b = cal["loop_insn_ns"]
    if "spin_iter_ns" in cal.values:
        extra = PV_SPIN_ITER_INSNS_NO_WINDOW - WAKE_POLL_ITER_INSNS
        return float(max(cal["spin_iter_ns"] - extra * b, WAKE_POLL_ITER_INSNS * b))
    return float(WAKE_POLL_ITER_INSNS * b)


#: guest instructions of one failed spin iteration of the spin-lock programs
#: with pv_exits (program.rs): the lock test and its branch (2), PAUSE, the
#: PAUSE count, the window check (inc, mov, test, jz, cmp, jb) and the loop
#: branch (TAS: a nop and the free test's cmp; ticket: the jmp back)
PV_SPIN_ITER_INSNS = 11


def _scheduled_twin(exp: Experiment, cal: Calibration, hkw: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    """The host, PLE and policy of the twin of a run under vcpulab's scheduler
    ([`vcpulab.sched`][vcpulab.sched]).

    * ``round_robin``: the simulator's model of vcpulab's scheduler
      (``Host(scheduler="round_robin")``, src/sim/tokens.rs): one run token
      per CPU of the run, one FIFO queue of runnable vCPUs, wall-time slices
      of the same length, halts that hand the token on; the kernel's fair
      scheduler (the calibrated base slice and tick) still shares each CPU
      between the token's holder and the other load the real trials measured.
      ``gang``: the simulator's gang scheduler with the same slice;
    * ``directed_yield``: the same tokens and slices, plus pause-loop exits with the same
      window dynamics (the window counted in cycles: ``spin_window`` failed
      iterations x the calibrated ``spin_iter_ns`` at the vCPU's TSC rate;
      calibrations without it count [`PV_SPIN_ITER_INSNS`][vcpulab.twins.PV_SPIN_ITER_INSNS] instructions x
      ``loop_insn_ns``), the exit's cost the calibrated user-space exit
      (``uexit_ns``), the same policy, and ``yield_to``'s cost the calibrated
      token hand-off (``sched_handoff_ns``, as ``Host.rq_lock_ns``: the
      spinner's CPU is busy with it before the candidate runs); ``yield_to``
      hands the spinner's token to a waiting candidate with a fresh slice
      and queues the spinner, as the real scheduler does.
    * ``relaxed_co``: the same tokens and slices with the simulator's relaxed
      co-scheduling (``Host(scheduler="relaxed_co")``, the same skew);
      ``balance``: with one queue per CPU and the same home CPUs
      (``Host(scheduler="balance")``); ``pinned``: one queue per CPU of the
      vCPUs pinned there, each vCPU on its home (``Experiment.homes``, by
      default CPU i mod n; ``Host(scheduler="pinned")``).
    * every token scheduler: each slice ends late by the calibration's
      ``token_slice_exit_ns`` (a log-normal draw with
      ``token_slice_exit_spread``; ``Host.token_slice_exit_ns``), the time the
      real holder's thread takes from its deadline back to the scheduler, so
      the CPUs' slices start together and drift apart as the real ones do
      (a calibration without it: exact slices, which stay aligned); each
      CPU's lateness is scaled for the run by its own factor of the
      calibration's ``token_slice_exit_cpu_spread``
      (``Host.token_slice_exit_cpu_spread``, 0.3.32), as each real CPU's
      slices end late by its own mean within a run;
    * every token scheduler: the programs' halt bracket
      (``Host.token_halt_bracket``): a halting vCPU gives its token up before
      ``hlt``, so KVM polls its halt without one, and the poll stops when the
      token's next holder arrives on its CPU, as on the real host.

    Simplification: the pv spin exit is modelled as a VMX pause-loop exit
    (``kind="vmx"``): the window counts cycles of spinning in one wait, and the
    exit is taken at once (the real exit waits for the iteration to end)."""
    from vcpulab import sched

    s = exp.scheduler
    # the scheduler's CPUs are the whole twin (its tokens), the vCPUs free within them
    n = len(exp.pcpus)
    hkw = {k: v for k, v in hkw.items() if k != "vcpu_pcpus"}
    hkw.update(n_pcpus=n, affinity="pinned" if n == 1 else "all")
    slice_ns = int(s.slice_us * 1e3)
    if isinstance(s, sched.Gang):
        hkw.update(scheduler="gang", gang_slice_ns=slice_ns)
    elif isinstance(s, sched.RelaxedCo):
        hkw.update(scheduler="relaxed_co", token_slice_ns=slice_ns, token_skew_ns=int(s.skew_us * 1e3))
    elif isinstance(s, sched.Balance):
        hkw.update(scheduler="balance", token_slice_ns=slice_ns)
    elif isinstance(s, sched.Pinned):
        # vCPU i at home on its CPU (Experiment.homes; by default CPU i mod n, as the real scheduler's)
        homes = [i % n for i in range(exp.vcpus)] if exp.homes is None else [exp.pcpus.index(h) for h in exp.homes]
        hkw.update(scheduler="pinned", token_slice_ns=slice_ns, affinity="pinned", vcpu_pcpus=homes)
    else:
        hkw.update(scheduler="round_robin", token_slice_ns=slice_ns)
    late = _measured(cal, "token_slice_exit_ns")
    if not isinstance(s, sched.Gang) and late > 0 and _host_field("token_slice_exit_ns"):
        # a slice ends when its holder's thread is back in the scheduler, a little late
        hkw.update(
            token_slice_exit_ns=int(round(late)),
            token_slice_exit_jitter=min(_measured(cal, "token_slice_exit_spread"), 1.0),
        )
        cpu_spread = _measured(cal, "token_slice_exit_cpu_spread")
        if cpu_spread > 0 and _host_field("token_slice_exit_cpu_spread"):
            # each CPU's slices end late by its own mean for the whole run
            hkw["token_slice_exit_cpu_spread"] = min(cpu_spread, 1.0)
    if not isinstance(s, sched.Gang) and exp.workload.pv_exits:
        # the program's halt bracket gives the token up before hlt: KVM polls the halt without
        # one, and the poll stops when the token's next holder arrives on the CPU
        hkw["token_halt_bracket"] = True
    ple, policy = sim.Ple.off(), sim.policies.no_yield()
    if isinstance(s, sched.DirectedYield):
        # one failed spin iteration with a window: measured without one (spin_iter_ns, under
        # round_robin) plus the window's cmp and jb at the register loop's cost, else counted
        if "spin_iter_ns" in cal.values:
            spin_ns = cal["spin_iter_ns"] + (PV_SPIN_ITER_INSNS - PV_SPIN_ITER_INSNS_NO_WINDOW) * cal["loop_insn_ns"]
        else:
            spin_ns = PV_SPIN_ITER_INSNS * cal["loop_insn_ns"]
        iter_cycles = spin_ns * cal["tsc_khz"] / 1e6
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
