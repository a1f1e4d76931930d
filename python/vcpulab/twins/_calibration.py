"""Calibration: this host's costs measured on real KVM ([`calibrate`][vcpulab.twins.calibrate]: the cost
per emulated instruction, wake-up latencies after a blocked halt and a poll, IPI delivery,
the exit to user space and the token hand-off of vcpulab's scheduler), cached once per process
(``_CACHE``, guarded by ``_LOCK``)."""

from __future__ import annotations

import functools
import os
import statistics
import threading
import time
import warnings
from collections.abc import Sequence

import numpy as np
import polars as pl

from vcpulab._checks import check_bool, check_int
from vcpulab.experiment import IpiPingPong, MsiPingPong, Run, SpinLock
from vcpulab.twins._guest import PV_SPIN_ITER_INSNS_NO_WINDOW, _iteration_insns, guest_path
from vcpulab.twins._speed import speed_not_measured, speed_probe
from vcpulab.twins._values import Calibration, Value, host_knobs

_CACHE: dict[int, Calibration] = {}
_LOCK = threading.Lock()

#: pairs of cost runs [`calibrate`][vcpulab.twins.calibrate] takes the median of
COST_REPEATS = 5

#: seconds of [`speed_probe`][vcpulab.twins.speed_probe] in a calibration
SPEED_PROBE_S = 5.0


def _stat_delta(run: Run, name: str, vcpu: int | None = None) -> int:
    """How much the cumulative stat ``name`` grew over the run, summed over
    the vCPUs (``vcpu``: that one's only); 0 without it."""
    s = run.samples if vcpu is None else run.samples.filter(pl.col("vcpu") == vcpu)
    if name not in s.columns or s.height == 0:
        return 0
    g = s.group_by(["vm", "vcpu"]).agg((pl.col(name).max() - pl.col(name).min()).alias("d"))
    return int(g["d"].sum())


def _cost_pair(cpu: int) -> tuple[float, float, list[tuple[int, int, int, int, int, int, Run]]]:
    """One pair of cost runs on host CPU ``cpu`` (step 1 of [`calibrate`][vcpulab.twins.calibrate]):
    a 1-vCPU TAS ``SpinLock`` with a short (hold = think = 5, 3000
    iterations) and a long loop (400, 150 iterations), each run's vCPU
    thread CPU time = ``path_insn_ns`` × its fixed-path instructions +
    ``loop_insn_ns`` × its loop instructions, solved for both. Returns
    ``(path_insn_ns, loop_insn_ns, rows)``, a row per run: (loop, acquisitions,
    emulated instructions, CPU ns, loop instructions, counted instructions
    per iteration, the Run); a disturbed or degenerate pair (a cost not
    positive) gives one cost for every instruction. About 0.2 s here."""
    from vcpulab.experiment import run

    rows = []
    for loop, iters in ((5, 3000), (400, 150)):
        w = SpinLock(kind="tas", hold=loop, think=loop, iterations=iters)
        r = run(w, vcpus=1, pcpus=[cpu], duration_s=10.0, sample_every_s=None, warn_quality=False)
        acq = int(r.results["acquisitions"].sum())
        insns = _stat_delta(r, "insn_emulation")
        cpu_ns = int(r.threads["cpu_ns"].sum())
        p = guest_path(w, 1)
        loop_insns = (p["hold_loop"] + p["think_loop"]) * acq
        rows.append((loop, acq, insns, cpu_ns, loop_insns, _iteration_insns(w, 1), r))
    # cpu = a·(insns − loop) + b·loop for both runs
    (_, _, i1, c1, l1, _, _), (_, _, i2, c2, l2, _, _) = rows
    m = np.array([[i1 - l1, l1], [i2 - l2, l2]], dtype=float)
    try:
        a, b = np.linalg.solve(m, np.array([c1, c2], dtype=float))
    except np.linalg.LinAlgError:
        a = b = float("nan")
    if not (a > 0 and b > 0):
        # a disturbed or degenerate pair: one cost for every instruction
        a = b = (c1 + c2) / max(i1 + i2, 1)
    return float(a), float(b), rows


def calibrate(cpu: int | None = None, *, refresh: bool = False) -> Calibration:
    """Measure this host's costs on host CPU ``cpu`` (default: the last one this
    process may use), about 10 s of real KVM (11 s on the project's 2-CPU host,
    5 of them step 5's speed probe); cached per process (``refresh`` measures again).

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
    2. Wake-up latencies: ``MsiPingPong`` on ``cpu`` (the host driver on the
       other CPU), 300 rounds 200 µs apart with halt polling off (every halt
       blocks) and 300 rounds 20 µs apart with a 200 µs maximum (polls catch
       them): median round trip minus the guest's instructions per round
       (``insn_emulation`` / rounds × ``path_insn_ns``).
    3. IPI delivery: `_calibrate_ipi` (``ipi_wake_ns``, ``ipi_round_insns``,
       ``ipi_wake_spread``).
    4. vcpulab's scheduler: `_calibrate_sched` (``uexit_ns``,
       ``sched_handoff_ns``, ``spin_iter_ns``, ``token_slice_exit_ns``,
       ``token_slice_exit_spread``), `_calibrate_wake_poll`
       (``wake_poll_iter_ns``, a failed mailbox check of ``WakePlacement``)
       and `_slice_exit_cpu_spread` (``token_slice_exit_cpu_spread``: how
       the CPUs' own slice lateness differs within a run).
    5. The host's speed over time: [`speed_probe`][vcpulab.twins.speed_probe] on every usable CPU
       for [`SPEED_PROBE_S`][vcpulab.twins.SPEED_PROBE_S] (``speed_fast_pct``, ``speed_slow_pct``,
       ``speed_fast_dwell_ns``, ``speed_slow_dwell_ns``: the two-state process
       a twin's host runs at, [`HostSpeed`][vcpulab.sim.HostSpeed]).
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
            pairs = [_cost_pair(cpu) for _ in range(COST_REPEATS)]
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
            vals.update(_calibrate_sched(cpu, a, b))
            vals.update(_slice_exit_cpu_spread(allowed))
            # the host's speed over time, on every CPU this process may use (twins.speed_probe);
            # a host that runs guest code natively has no emulation speed to probe: one speed
            try:
                vals.update(speed_probe(allowed, duration_s=SPEED_PROBE_S).values)
            except ValueError as e:
                vals.update(speed_not_measured(str(e)))
        from vcpulab.provenance import provenance

        cal = Calibration(values=vals, cpu=cpu, provenance=provenance())
        _CACHE[cpu] = cal
        return cal


#: instructions of vCPU 0's IpiPingPong round outside its timed window (``mov [rbx], r12; jmp;
#: cmp r12; jae; mov r14, [rsi]; rdtsc; shl; or; mov r13, rax``: src/kvm/guest/program.rs, gap 0)
IPI_OUTSIDE_INSNS = 9


def _calibrate_sched(cpu: int, path_insn_ns: float, loop_insn_ns: float) -> dict[str, Value]:
    """What a twin of a run under vcpulab's scheduler needs: the cost of an
    exit to user space (an ``io_loop`` of 2000 port writes, the median of
    `UEXIT_CAL_LOOPS` after a warm-up: the vCPU thread's CPU time per exit
    minus its 3 guest instructions), the token hand-off
    (spin exit → the candidate entering KVM_RUN) of a directed-yield run of a
    ticket lock, 3 vCPUs on ``cpu``: the median of ``Run.spins.latency_ns``,
    and the time of one failed spin iteration of the programs with pv exits
    (``spin_iter_ns``): a ticket lock of 2 vCPUs on ``cpu`` under
    ``sched.round_robin`` (its waiters spin whole slices without an exit),
    the vCPU threads' CPU time less the acquisitions' counted instructions
    at ``path_insn_ns`` / ``loop_insn_ns``, over the PAUSEs the waiters
    counted. It is measured because the instruction costs come from runs
    that never wait: a PAUSE is not among the instructions they time."""
    from vcpulab import sched
    from vcpulab.experiment import run
    from vcpulab.kvm import Host
    from vcpulab.sim import policies as P

    n = 2000
    cpu_ns: list[int] = []

    def exits() -> None:
        os.sched_setaffinity(0, {cpu})
        # one warm-up loop (its first exits run 20-30 % slower here), then the measured ones
        for i in range(1 + UEXIT_CAL_LOOPS):
            v.start(prog)  # the same program again, from its entry
            c0 = time.thread_time_ns()
            v.run_until("ucall", timeout_s=20)
            if i:
                cpu_ns.append(time.thread_time_ns() - c0)

    with Host().create_vm(memory_mib=4) as vm:
        v = vm.create_vcpu(0)
        prog = vm.load("io_loop", port=0x80, count=n)
        t = threading.Thread(target=exits)
        t.start()
        t.join(30)
    if len(cpu_ns) < UEXIT_CAL_LOOPS:
        raise TimeoutError(f"twins.calibrate: the io_loops of {n} exits on CPU {cpu} did not finish")
    per_exit = statistics.median(cpu_ns) / n - 3 * path_insn_ns
    spread = f"{min(cpu_ns) / n:.0f}-{max(cpu_ns) / n:.0f} ns per exit"
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
    w = SpinLock(kind="ticket", hold=50, think=50)
    rr = run(w, vcpus=2, pcpus=[cpu], duration_s=0.3, sample_every_s=None, scheduler=sched.round_robin())
    acq = int(rr.results["acquisitions"].sum())
    pauses = int(rr.results["pauses"].sum())
    p = guest_path(w, 2, pv_exits=True)
    loop = (p["hold_loop"] + p["think_loop"]) * acq
    path = (p["hold_path"] + p["think_path"] + p["wait_path"]) * acq
    cpu_total = int(rr.threads["cpu_ns"].sum())
    spin = (cpu_total - loop * loop_insn_ns - path * path_insn_ns) / pauses if pauses else float("nan")
    if not spin > 0:
        # nothing to measure (no waits) or a disturbed run: the counted instructions
        spin = PV_SPIN_ITER_INSNS_NO_WINDOW * loop_insn_ns
    late, late_spread, late_how = _slice_exit_of(rr)
    poll_iter, poll_how = _calibrate_wake_poll(cpu)
    return {
        "token_slice_exit_ns": Value(late, "ns", late_how),
        "token_slice_exit_spread": Value(
            late_spread,
            "",
            "the log-normal spread of token_slice_exit_ns: ln(p90 / p50) / 1.2816 of the same slice ends",
        ),
        "uexit_ns": Value(
            max(per_exit, 0.0),
            "ns",
            f"io_loop of {n} port writes on CPU {cpu}, the median of {UEXIT_CAL_LOOPS} after a warm-up ({spread}): "
            "vCPU thread CPU time per exit minus 3 instructions x path_insn_ns",
        ),
        "sched_handoff_ns": Value(
            handoff,
            "ns",
            f"directed_yield(dy_eligible) of a ticket SpinLock, 3 vCPUs on CPU {cpu}, 0.3 s: median of "
            f"{lat.len()} spin exit -> candidate enters KVM_RUN latencies",
        ),
        "spin_iter_ns": Value(
            spin,
            "ns",
            f"round_robin ticket SpinLock 50/50, 2 vCPUs on CPU {cpu}, 0.3 s: (vCPU threads' CPU time "
            f"{cpu_total / 1e6:.1f} ms - {acq} acquisitions' counted instructions) / {pauses} PAUSEs of the waiters "
            f"(no spin window: {PV_SPIN_ITER_INSNS_NO_WINDOW} instructions each; counted at loop_insn_ns: "
            f"{PV_SPIN_ITER_INSNS_NO_WINDOW * loop_insn_ns:.0f} ns)",
        ),
        "wake_poll_iter_ns": Value(poll_iter, "ns", poll_how),
    }


def _slice_lateness_ns(r: Run) -> tuple[float, dict[int, np.ndarray]] | None:
    """A scheduled run's slice ends, how late each came: the scheduler's
    slice and, per host CPU, its holds that end in ``slice`` less that
    slice (the positive ones); None for a run without a decision log."""
    from vcpulab.twins._schedule import token_holds

    slice_ns = float((r.config.get("scheduler") or {}).get("slice_us", 0)) * 1e3
    if r.schedule is None or slice_ns <= 0:
        return None
    h = token_holds(r.schedule, int(r.wall_s * 1e9)).filter(pl.col("why_out") == "slice")
    per_cpu = {}
    for (cpu,), g in h.group_by("pcpu", maintain_order=True):
        late = g["held_ns"].cast(pl.Float64).to_numpy() - slice_ns
        per_cpu[int(cpu)] = late[late > 0]
    return slice_ns, per_cpu


def _slice_exit_of(r: Run) -> tuple[float, float, str]:
    """How late a token's slice ends in a scheduled run (``Run.schedule``):
    the median of the holds that end in ``slice`` less the scheduler's
    slice, and the log-normal spread of that lateness (ln(p90 / p50) /
    1.2816, the 90th percentile's z); (0, 0) with fewer than 10 such holds
    or a run without a log. The real slice ends when the holder's thread,
    kicked out of ``KVM_RUN`` at its deadline, is back in the scheduler."""
    got = _slice_lateness_ns(r)
    if got is None:
        return 0.0, 0.0, "no decision log"
    slice_ns, per_cpu = got
    late = np.concatenate(list(per_cpu.values())) if per_cpu else np.zeros(0)
    if late.size < 10:
        return 0.0, 0.0, f"{late.size} slice ends (fewer than 10)"
    p10, p50, p90 = (float(x) for x in np.percentile(late, [10, 50, 90]))
    spread = max(np.log(p90 / p50) / 1.2816, 0.0) if p50 > 0 else 0.0
    how = (
        f"round_robin ticket SpinLock 50/50, 2 vCPUs, 0.3 s: {late.size} slice ends, the holds less the "
        f"{slice_ns / 1e6:g}-ms slice: p10 {p10 / 1e3:.1f} µs, median {p50 / 1e3:.1f} µs, p90 {p90 / 1e3:.1f} µs"
    )
    return p50, float(spread), how


#: runs of `_slice_exit_cpu_spread`, each of ``SLICE_SPREAD_RUN_S``
SLICE_SPREAD_RUNS = 5
SLICE_SPREAD_RUN_S = 0.3


def _slice_exit_cpu_spread(cpus: list[int]) -> dict[str, Value]:
    """``token_slice_exit_cpu_spread``: how each CPU's slices end late by
    its own mean within a run. `SLICE_SPREAD_RUNS` runs of a ticket
    ``SpinLock`` 50/50 under ``sched.round_robin`` with one vCPU more than
    ``cpus`` (someone always waits, so every slice ends in a hand-off); per
    run and CPU the median lateness of its slice ends (the holds less the
    slice); per run the standard deviation of those medians' logarithms
    (with two CPUs, |ln(a / b)| / √2), and the runs' root mean square. 0
    (one median for every CPU) with one CPU or too few slice ends."""
    from vcpulab import sched
    from vcpulab.experiment import SpinLock, run

    key = "token_slice_exit_cpu_spread"
    if len(cpus) < 2:
        return {key: Value(0.0, "", "one usable CPU: nothing to compare")}
    w = SpinLock(kind="ticket", hold=50, think=50)
    per_run: list[float] = []
    seen: list[str] = []
    for _ in range(SLICE_SPREAD_RUNS):
        r = run(
            w,
            vcpus=len(cpus) + 1,
            pcpus=cpus,
            duration_s=SLICE_SPREAD_RUN_S,
            sample_every_s=None,
            scheduler=sched.round_robin(),
            warn_quality=False,  # a calibration step: calibrate reports no run's quality either
        )
        got = _slice_lateness_ns(r)
        if got is None:
            continue
        meds = [float(np.median(late)) for late in got[1].values() if late.size >= 10]
        if len(meds) >= 2:
            per_run.append(float(np.std(np.log(meds), ddof=1)))
            seen.append("/".join(f"{m / 1e3:.1f}" for m in meds))
    if not per_run:
        return {key: Value(0.0, "", "no run had two CPUs with 10 slice ends each")}
    spread = float(np.sqrt(np.mean(np.square(per_run))))
    how = (
        f"round_robin ticket SpinLock 50/50, {len(cpus) + 1} vCPUs on CPUs {cpus}, {len(per_run)} runs of "
        f"{SLICE_SPREAD_RUN_S:g} s: per-CPU median lateness of the slice ends (µs) {', '.join(seen)}; the runs' "
        "root mean square of the standard deviation of their logarithms"
    )
    return {key: Value(spread, "", how)}


#: measured ``io_loop`` runs of `_calibrate_sched`'s ``uexit_ns`` (their median); one run read
#: 6.0-8.4 µs per exit in 12 back-to-back loops here (2026-12-06), the first ones the slowest
UEXIT_CAL_LOOPS = 5

#: failed mailbox checks per item of the polling run of `_calibrate_wake_poll`
WAKE_POLL_CAL_CHECKS = 200


def _calibrate_wake_poll(cpu: int) -> tuple[float, str]:
    """One failed mailbox check of a ``WakePlacement`` worker's poll loop
    (``wake_poll_iter_ns``): the waker and one worker on ``cpu`` under
    ``sched.pinned``, host halt polling off, twice, with ``poll`` = 0 and
    [`WAKE_POLL_CAL_CHECKS`][vcpulab.twins.WAKE_POLL_CAL_CHECKS]. On one CPU the worker's poll holds the CPU
    while the waker waits for it, so every poll runs out (the run checks
    that none hit): the worker thread's CPU time per item grows by exactly
    ``poll`` failed checks. Measured, not counted: the checks read memory and
    PAUSE, which under emulation cost more than the register loop of
    ``loop_insn_ns`` (in one calibration here: 8.7 µs measured, 7.3 µs derived
    from its ``spin_iter_ns`` and ``loop_insn_ns``). NaN (then the twin
    derives it) if a run hit."""
    from vcpulab import sched
    from vcpulab.experiment import WakePlacement, run

    per_item: dict[int, float] = {}
    hits = 0
    for poll in (0, WAKE_POLL_CAL_CHECKS):
        r = run(
            WakePlacement(poll=poll, work=0),
            vcpus=2,
            pcpus=[cpu],
            duration_s=0.3,
            sample_every_s=None,
            scheduler=sched.pinned(),
            halt_poll_ns=0,
        )
        res = r.results.sort("vcpu")
        items = max(int(res["items"][1]), 1)
        hits += int(res["poll_hits"][1])
        worker = r.threads.filter(pl.col("vcpu") == 1)
        per_item[poll] = float(worker["cpu_ns"].sum()) / items
    diff = (per_item[WAKE_POLL_CAL_CHECKS] - per_item[0]) / WAKE_POLL_CAL_CHECKS
    value = diff if hits == 0 and diff > 0 else float("nan")
    return value, (
        f"WakePlacement(work=0), waker and worker on CPU {cpu} under sched.pinned, halt polling off, 0.3 s with poll "
        f"= 0 and {WAKE_POLL_CAL_CHECKS} (every poll runs out: {hits} hits): the worker thread's CPU time per item, "
        f"{per_item[0] / 1e3:.0f} and {per_item[WAKE_POLL_CAL_CHECKS] / 1e3:.0f} us, its difference over "
        f"{WAKE_POLL_CAL_CHECKS} checks"
    )


def _calibrate_ipi(allowed: Sequence[int], cpu: int, path_insn_ns: float) -> dict[str, Value]:
    """IPI delivery to a halted vCPU: ``IpiPingPong`` on two vCPUs (one CPU
    each: ``cpu`` and another usable one, else both on ``cpu``), halt polling
    off. A run with no gap counts the round's instructions (``insn_emulation``
    / rounds); one with 200 µs gaps (both vCPUs halted long enough to block)
    times the round trip. Each round trip holds two wake-ups of a blocked vCPU
    and the round's instructions inside the timed window (all but
    [`IPI_OUTSIDE_INSNS`][vcpulab.twins.IPI_OUTSIDE_INSNS]), so one wake-up = (median round trip − those
    instructions × ``path_insn_ns``) / 2.

    ``halt_wake_ns``: the host CPU a blocked halt costs beyond a polled one
    (the vCPU thread's switch to idle and back: ``schedule()``, KVM's preempt
    notifiers with ``vcpu_put``/``vcpu_load``, the block's return and the
    interrupt's injection, here on kvm_pvm). A third run
    repeats the 200 µs-gap run with a 1 ms polling maximum (its halts mostly
    polled); vCPU 1 runs the same instructions in both, so the difference of
    its thread's CPU time per round (the poll's time taken off) over the
    difference of its blocked halts per round is the cost of one blocked halt,
    whatever an instruction costs that second. Traced here (2026-12-06), nearly
    all of it lies between the woken thread's switch-in and its reply (the
    reply's wake-up comes ~1 µs before the switch out): it is on the wake-up's
    path, and the scheduler's own wake-up → run latency is 3.7-5.9 µs of the
    ~34 µs ``ipi_wake_ns``. [`twin`][vcpulab.twins.twin] charges it as
    ``Pv.halt_wake_ns``. ``halt_wake_spread``: the first run's round trips'
    p10-p90 charged to it (two blocked halts a round trip), as
    ``ipi_wake_spread`` charges them to the whole wake-ups."""
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
    wakes = max(rtt - inside * path_insn_ns, 0.0)
    out["ipi_wake_ns"] = Value(
        wakes / 2,
        "ns",
        f"IpiPingPong, gap 200 us, max poll 0, 300 rounds, {where}: (median round trip {rtt / 1e3:.1f} us − "
        f"{inside:.0f} instructions x path_insn_ns) / 2 wake-ups",
    )
    rp = run(
        IpiPingPong(rounds=300, gap_us=200.0),
        vcpus=2,
        placement=placement,
        duration_s=10.0,
        halt_poll_ns=HALT_WAKE_CAL_POLL_NS,
        sample_every_s=None,
    )
    wake_cpu, how = blocked_halt_ns(_halt_cpu_per_round(r), _halt_cpu_per_round(rp))
    out["halt_wake_ns"] = Value(
        wake_cpu,
        "ns",
        f"IpiPingPong, gap 200 us, 300 rounds, {where}, run with max poll 0 and again with {HALT_WAKE_CAL_POLL_NS} ns: "
        f"vCPU 1's {how}",
    )
    p10, p90 = (float(r.results[f"rtt_{q}_us"][0]) * 1e3 for q in ("p10", "p90"))
    out["halt_wake_spread"] = Value(
        ipi_wake_spread_of((p90 - p10) / (2 * wake_cpu)) if wake_cpu > 0 else float("nan"),
        "",
        f"the first run's round trips' p10-p90 ({p10 / 1e3:.1f}-{p90 / 1e3:.1f} us) over two halt_wake_ns "
        "(each round trip holds two blocked halts), matched by the sum of two log-normal draws (median 1, log "
        "standard deviation this value, fitted on a fixed sample): the whole spread charged to the blocked "
        "halts' CPU, where the trace puts the wake-up's time (an upper bound); NaN without halt_wake_ns",
    )
    width = (p90 - p10) / wakes if wakes > 0 else float("nan")
    out["ipi_wake_spread"] = Value(
        ipi_wake_spread_of(width),
        "",
        f"the first run: its round trips' p10-p90 ({p10 / 1e3:.1f}-{p90 / 1e3:.1f} us) over the two wake-ups' "
        f"{wakes / 1e3:.1f} us ({width:.2f}) matched by the sum of two log-normal wake-ups (median 1, log "
        "standard deviation this value, fitted on a fixed sample): the whole spread charged to the wake-ups, "
        "the instructions' own spread included (an upper bound)",
    )
    return out


#: the polling maximum of `_calibrate_ipi`'s polled run, ns: well above the 200 µs gap plus
#: the round, so that a halt of either vCPU is caught by the poll once the window has grown
HALT_WAKE_CAL_POLL_NS = 1_000_000


def _halt_cpu_per_round(r: Run, vcpu: int = 1) -> tuple[float, float]:
    """``vcpu``'s thread CPU time per round of an ``IpiPingPong`` run less its
    halt polling, and its halts per round that blocked (not caught by a poll)."""
    rounds = max(int(r.results["rounds"][0]), 1)
    cpu = int(r.threads.filter(pl.col("vcpu") == vcpu)["cpu_ns"][0])
    poll = _stat_delta(r, "halt_poll_success_ns", vcpu) + _stat_delta(r, "halt_poll_fail_ns", vcpu)
    blocks = _stat_delta(r, "halt_exits", vcpu) - _stat_delta(r, "halt_successful_poll", vcpu)
    return (cpu - poll) / rounds, blocks / rounds


def blocked_halt_ns(blocked: tuple[float, float], polled: tuple[float, float]) -> tuple[float, str]:
    """The CPU time of one blocked halt beyond a polled one from two runs of
    one program that differ in the polling maximum alone, each given as (CPU
    per round less the halt polling, halts per round that blocked): both
    spend ``insns + k·cost`` per round, so ``cost`` = the difference of
    the CPU over the difference of ``k``. Returns it in ns with how it was
    obtained; NaN, with the reason, when the blocked halts per round differ
    by less than 0.3 (the polls did not catch enough halts) or the result is
    not positive (a disturbed run)."""
    (c0, k0), (c1, k1) = blocked, polled
    how = (
        f"thread CPU per round less its polling: {c0 / 1e3:.1f} us with {k0:.2f} blocked halts per round, "
        f"{c1 / 1e3:.1f} us with {k1:.2f}; the difference over the blocked halts' difference"
    )
    if not k0 - k1 >= 0.3:
        return float("nan"), how + " (not measured: the polled run's halts blocked too)"
    cost = (c0 - c1) / (k0 - k1)
    if not cost > 0:
        return float("nan"), how + f" (not measured: {cost:.0f} ns, not positive)"
    return float(cost), how


#: the fixed sample `ipi_wake_spread_of` and `ipi_pair_median` draw their
#: log-normal pairs from (seeded: the same spread always gives the same answer)
_PAIR_Z = np.random.default_rng(20261206).standard_normal((2, 40_000))
#: the log standard deviations `ipi_wake_spread_of` chooses from
_SPREADS = np.round(np.arange(0.0, 1.0001, 0.005), 3)


@functools.lru_cache(maxsize=64)
def ipi_pair_median(spread: float) -> float:
    """The median of the sum of two log-normal wake-ups of median 1 and log
    standard deviation ``spread`` (2.0 at 0; above 2 otherwise: the sum's
    right tail moves its median). A round trip's median is ``ipi_wake_ns`` x
    2, so a twin that draws each wake-up from the log-normal takes
    ``ipi_wake_ns`` x 2 / this as its median wake-up."""
    return float(np.median(np.exp(spread * _PAIR_Z).sum(axis=0)))


def ipi_wake_spread_of(width: float) -> float:
    """The log standard deviation ``s`` of one wake-up whose pair (two
    log-normal wake-ups, median 1 each) has a p10-p90 width of ``width`` times
    its median: the smallest ``s`` of a 0.005 grid on [0, 1] that reaches it
    (1.0 where none does; 0.0 for NaN or a width <= 0)."""
    if not width > 0:
        return 0.0

    def reaches(i: int) -> bool:
        q10, q50, q90 = np.percentile(np.exp(_SPREADS[i] * _PAIR_Z).sum(axis=0), (10, 50, 90))
        return bool((q90 - q10) / q50 >= width)

    # the width grows with s: bisect for the first grid point that reaches it
    lo, hi = 0, len(_SPREADS) - 1
    if not reaches(hi):
        return 1.0
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid + 1, hi)
    return float(_SPREADS[lo])


def _tsc_khz() -> int:
    from vcpulab.kvm import Host

    h = Host()
    vm = h.create_vm(memory_mib=4)
    try:
        return int(vm.create_vcpu(0).tsc_khz)
    finally:
        vm.close()
