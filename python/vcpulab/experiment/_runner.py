"""[`run`][vcpulab.experiment.run] and what only it uses: the placement of the vCPUs, the
host drivers, the run's quality, the schedule frames, provenance. Imports the other modules
of the package (_workloads, _args, _results); none of them imports it."""

from __future__ import annotations

import numbers
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, overload

import numpy as np
import polars as pl

from vcpulab import _core, tracing
from vcpulab import sched as _sched
from vcpulab._checks import frames_in_package, guard_panics, renamed
from vcpulab._frames import with_key_dtypes
from vcpulab._interrupt import held, keep_partial
from vcpulab.experiment._args import _check_run_args, _check_scheduler
from vcpulab.experiment._results import Run, Trials
from vcpulab.experiment._workloads import GRACE_S, IpiPingPong, SpinLock, Workload, _record_gpa
from vcpulab.kvm import Host, Program, Vcpu, Vm
from vcpulab.quality import Census, Quality, census, quality, snapshot
from vcpulab.sched import Scheduler


def _schedule_frames(d: dict[str, Any]) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    dec = pl.DataFrame({k: (v if isinstance(v, list) else np.asarray(v)) for k, v in d["decisions"].items()})
    # one dtype for the reason on both sides: the simulator's Result.schedule has this enum too
    dec = dec.with_columns(pl.col("why").cast(pl.Enum(_core.SCHED_WHY)))
    spins = pl.DataFrame({k: np.asarray(v) for k, v in d["spins"].items()})
    return dec, spins, {"dropped": int(d["dropped"]), "watchdog_kicks": int(d["watchdog_kicks"])}


def _placement(
    n_vms: int, n_vcpus: int, pcpus: Sequence[int] | None, placement: Sequence[Sequence[int]] | None
) -> dict[tuple[int, int], list[int]]:
    allowed = set(_core.allowed_cpus())
    total = n_vms * n_vcpus
    if placement is not None:
        if len(placement) != total:
            raise ValueError(f"placement needs one CPU list per vCPU ({total}), got {len(placement)}")
        lists = [list(p) for p in placement]
    else:
        cpus = sorted(allowed) if pcpus is None else list(pcpus)
        if not cpus:
            raise ValueError("pcpus must name at least one host CPU")
        lists = [cpus] * total
    name = "pcpus" if placement is None else "placement"
    for cl in lists:
        bad = [c for c in cl if c not in allowed]
        if not cl:
            raise ValueError(f"{name}: a vCPU's list of host CPUs is empty; this process may run on {sorted(allowed)}")
        if bad:
            raise ValueError(f"{name}: host CPUs {bad} are not usable; this process may run on {sorted(allowed)}")
    return {(i // n_vcpus, i % n_vcpus): lists[i] for i in range(total)}


@overload
def run(
    workload: Workload,
    vcpus: int = ...,
    pcpus: Sequence[int] | None = ...,
    placement: Sequence[Sequence[int]] | None = ...,
    duration_s: float = ...,
    sample_every_s: float | None = ...,
    vms: int = ...,
    memory_mib: int = ...,
    halt_poll_ns: int | None = ...,
    steal_time: bool = ...,
    host: Host | None = ...,
    poll_every_s: float = ...,
    warn_quality: bool = ...,
    quality_thresholds: dict[str, float] | None = ...,
    repeat: None = ...,
    trace: bool = ...,
    trace_max_events: int = ...,
    trace_kvm_events: bool = ...,
    scheduler: Scheduler | None = ...,
) -> Run: ...


@overload
def run(
    workload: Workload,
    vcpus: int = ...,
    pcpus: Sequence[int] | None = ...,
    placement: Sequence[Sequence[int]] | None = ...,
    duration_s: float = ...,
    sample_every_s: float | None = ...,
    vms: int = ...,
    memory_mib: int = ...,
    halt_poll_ns: int | None = ...,
    steal_time: bool = ...,
    host: Host | None = ...,
    poll_every_s: float = ...,
    warn_quality: bool = ...,
    quality_thresholds: dict[str, float] | None = ...,
    *,
    repeat: int,
    trace: bool = ...,
    trace_max_events: int = ...,
    trace_kvm_events: bool = ...,
    scheduler: Scheduler | None = ...,
) -> Trials: ...


@renamed(duration="duration_s", sample_every="sample_every_s", poll_every="poll_every_s")
@guard_panics
def run(
    workload: Workload,
    vcpus: int = 2,
    pcpus: Sequence[int] | None = None,
    placement: Sequence[Sequence[int]] | None = None,
    duration_s: float = 1.0,
    sample_every_s: float | None = 0.01,
    vms: int = 1,
    memory_mib: int = 16,
    halt_poll_ns: int | None = None,
    steal_time: bool = True,
    host: Host | None = None,
    poll_every_s: float = 0.05,
    warn_quality: bool = True,
    quality_thresholds: dict[str, float] | None = None,
    repeat: int | None = None,
    trace: bool = False,
    trace_max_events: int = tracing.DEFAULT_MAX_EVENTS,
    trace_kvm_events: bool = True,
    scheduler: Scheduler | None = None,
) -> Run | Trials:
    """Run ``workload`` on ``vms`` VMs of ``vcpus`` vCPUs each.

    Args:
        pcpus: host CPUs every vCPU thread is pinned to (default: all this
            process may use). ``placement`` instead gives one CPU list per vCPU
            (VM-major order).
        duration_s: seconds; graceful workloads then get up to ``GRACE_S`` more
            to finish their current iteration.
        sample_every_s: sampling period in seconds (None: first and last sample only).
        halt_poll_ns: per-VM maximum halt-poll time (None: the module parameter).
        steal_time: register each vCPU's steal-time area (MSR_KVM_STEAL_TIME).
        warn_quality: issue a [`QualityWarning`][vcpulab.quality.QualityWarning] when
            other tasks disturbed the run (``Run.quality`` says how; it is
            recorded either way).
        quality_thresholds: ``max_other_share`` / ``max_alone_delay_share``
            for [`vcpulab.quality.quality`][] (default 0.02 each).
        poll_every_s: how often the run checks for Ctrl-C, s (at most 1).
        repeat: run ``repeat`` independent trials (fresh VMs each) and return
            [`Trials`][vcpulab.experiment.Trials] (every trial's frames, means with confidence
            intervals) instead of one [`Run`][vcpulab.experiment.Run]. Ctrl-C stops within a
            second; ``KeyboardInterrupt.partial`` is the [`Trials`][vcpulab.experiment.Trials] of
            the finished trials (None before the first).
        trace: record the run's scheduler and KVM tracepoints (docs/tracing.md):
            ``Run.trace``, ``Run.wakeups``, ``Run.exits``, ``Run.halts``, and
            ``Run.quality`` takes other tasks' time from the trace (exact). The
            vCPU threads time their own exits to user space (two clock reads
            per ``KVM_RUN``) instead of the kernel's two records per exit.
            Needs tracefs (mounted when absent and root; else
            ``TraceUnavailableError``).
        trace_max_events: cap on traced events kept; beyond it the trace is
            flagged ``Run.trace_info["truncated"]``.
        trace_kvm_events: with ``trace``, record the KVM tracepoints too
            (``Run.exits``, ``Run.halts``). False records only the scheduler's
            (``Run.trace``, ``Run.wakeups``: a sched map) and no exits or halts.
        scheduler: who schedules the vCPU threads ([`vcpulab.sched`][vcpulab.sched]):
            ``sched.host()`` (None, the default) leaves them to the kernel;
            ``sched.round_robin()``, ``gang()``, ``relaxed_co()``,
            ``balance()``, ``pinned()`` or ``directed_yield(policy)`` run them under
            vcpulab's own scheduler on the ``pcpus`` (one run token each; under
            ``pinned()``, ``placement`` may pin each vCPU to its home CPU), and
            the Run gains ``schedule`` (every token hand-off), ``spins`` (every
            pv spin exit) and ``schedule_info``. Spin-lock workloads then make
            pv spin exits and halt brackets; the kernel-halting workloads
            (MsiPingPong, IpiPingPong, IdleTicks) are not scheduled yet.

    Every argument is checked before anything is created (TypeError /
    ValueError naming it): at most ``MAX_VCPUS`` vCPUs per VM, a duration of
    at most ``MAX_DURATION_S``, a message gap shorter than the run.
    """
    _check_run_args(
        workload,
        vcpus,
        vms,
        duration_s,
        sample_every_s,
        memory_mib,
        halt_poll_ns,
        steal_time,
        poll_every_s,
        pcpus,
        placement,
        host,
        quality_thresholds,
        trace,
        trace_max_events,
        warn_quality,
        trace_kvm_events,
    )
    # the workload's own fields first: the scheduler's checks read them (forced_bytes)
    workload.check(int(vcpus), True)
    scheduler = _check_scheduler(scheduler, workload, vcpus, vms, pcpus, placement)
    if repeat is not None:
        if isinstance(repeat, bool) or not isinstance(repeat, numbers.Integral) or not 1 <= repeat <= 1000:
            raise ValueError(f"repeat must be an int in [1, 1000], got {repeat!r}")
        repeat = int(repeat)
        kw = dict(
            vcpus=vcpus,
            pcpus=pcpus,
            placement=placement,
            duration_s=duration_s,
            sample_every_s=sample_every_s,
            vms=vms,
            memory_mib=memory_mib,
            halt_poll_ns=halt_poll_ns,
            steal_time=steal_time,
            host=host,
            poll_every_s=poll_every_s,
            warn_quality=warn_quality,
            quality_thresholds=quality_thresholds,
            trace=trace,
            trace_max_events=trace_max_events,
            trace_kvm_events=trace_kvm_events,
            scheduler=scheduler,
        )
        done: list[Run] = []
        try:
            for _ in range(repeat):
                done.append(run(workload, **kw))  # type: ignore[call-overload]
        except KeyboardInterrupt as e:
            keep_partial(
                e, Trials(done) if done else None, call="experiment.run", done=len(done), total=repeat, unit="trials"
            )
            raise
        return Trials(done)
    vcpus, vms, duration_s = int(vcpus), int(vms), float(duration_s)
    workload.check(vcpus, True)
    where = _placement(vms, vcpus, pcpus, placement)
    host = host or Host()
    vm_objs: list[Vm] = []
    tracer: tracing.Trace | None = None
    scheduled = not scheduler.is_host
    window_gpas: list[int | None] = []
    try:
        plan = []
        progs: list[Program] = []
        groups: list[list[Vcpu]] = []
        for i in range(vms):
            vm = host.create_vm(memory_mib=memory_mib)
            vm_objs.append(vm)
            if halt_poll_ns is not None:
                vm.halt_poll_ns = halt_poll_ns
            vs = [vm.create_vcpu(j) for j in range(vcpus)]
            params = dict(workload.params(vcpus))
            if scheduled and workload.pv_exits:
                params["pv_exits"] = 1
            if isinstance(workload, IpiPingPong):
                params["gap_cycles"] = int(workload.gap_us * vs[0].tsc_khz / 1e3)
            prog = vm.load(workload.program, **params)  # type: ignore[arg-type]
            forced = workload.forced_bytes
            for v in vs:
                v.start(prog)
                if steal_time and v.id not in forced:
                    v.enable_steal_time()
                for off, val in forced.get(v.id, {}).items():
                    # a byte of its (default) steal-time area, which KVM then never writes
                    vm.write_u8(_core.STEAL_AREA_ADDR + 64 * v.id + off, val)
                plan.append((v._vcpu, i, where[(i, v.id)]))
                if scheduled:
                    window_gpas.append(
                        _record_gpa(prog, "spin_window", v.id) if isinstance(workload, SpinLock) else None
                    )
            progs.append(prog)
            groups.append(vs)

        hard = duration_s + (GRACE_S if workload.graceful else 0.0)
        stoppers: list[threading.Timer] = []
        if workload.graceful:
            for vm, prog in zip(vm_objs, progs):
                t = threading.Timer(duration_s, workload.stop, args=(vm, prog))
                t.daemon = True
                stoppers.append(t)
        vcpu_cpus = {c for cl in where.values() for c in cl}
        driver_cpus = sorted(set(_core.allowed_cpus()) - vcpu_cpus)
        drivers: list[_Driver] = [
            _Driver(workload, vm, vs, prog, hard, driver_cpus) for vm, vs, prog in zip(vm_objs, groups, progs)
        ]
        tracer = (
            tracing.Trace(
                sorted(vcpu_cpus),
                max_events=trace_max_events,
                kvm_events=trace_kvm_events,
                vcpus=[v for vs in groups for v in vs],
            )
            if trace
            else None
        )
        # every task's CPU time around the run's counters (Run.quality: other
        # tasks' time, without the interrupt time cpuidle counts as busy)
        census0 = census()
        snap0 = snapshot(vcpu_cpus)
        t0 = time.perf_counter()
        for t in stoppers:
            t.start()
        for d in drivers:
            d.start()
        try:
            sched_cfg = _sched._core_config(scheduler, sorted(vcpu_cpus), window_gpas, vms)
            rep = _core.run_experiment(plan, hard, sample_every_s, poll_every_s, scheduler=sched_cfg)
            # the run's clock and host counters stop with its vCPUs, before the
            # trace's stop (0.3-0.4 s here: an RCU grace period per perf fd
            # closed) and the drivers' join, which are not part of the run
            wall = time.perf_counter() - t0
            snap1 = snapshot(vcpu_cpus)
            census1 = census()
            if tracer is not None:
                tracer.stop()
        except BaseException:
            # Ctrl-C or an error: closing the VMs stops every host driver at
            # once (they poll for it), then they are joined.
            if tracer is not None:
                tracer.close()
            for vm in vm_objs:
                vm.close()
            raise
        finally:
            for t in stoppers:
                t.cancel()
            for vm, prog in zip(vm_objs, progs):
                if workload.graceful and not vm.closed:
                    workload.stop(vm, prog)
            for d in drivers:
                d.join(timeout=hard + 5)
        if "error" in rep:
            # the first vCPU thread's error, already the exception it converts to
            raise rep["error"]
        for d in drivers:
            if d.error is not None:
                raise d.error

        # Ctrl-C while the frames are built is raised after them (polars would turn it into a TypeError)
        with held():
            # key columns (vm, vcpu) are Int64 in every frame (vcpulab._frames)
            samples = with_key_dtypes(pl.DataFrame({k: np.asarray(v) for k, v in rep["samples"].items()}))
            threads = pl.DataFrame(
                {
                    k: [t[k] for t in rep["threads"]]
                    for k in (
                        "vm",
                        "vcpu",
                        "tid",
                        "cpu_ns",
                        "run_delay_ns",
                        "timeslices",
                        "voluntary_ctxt_switches",
                        "nonvoluntary_ctxt_switches",
                        "wall_ns",
                        "start_ns",
                        "user_exits",
                        "outcome",
                    )
                }
            ).with_columns(pl.Series("cpus", [t["cpus"] for t in rep["threads"]]))
            res_rows: dict[str, list[Any]] = {"vm": [], "vcpu": []}
            item_frames: list[pl.DataFrame] = []
            for i, (vm, vs, prog, d) in enumerate(zip(vm_objs, groups, progs, drivers)):
                cols = workload.results(vm, prog, vs, d.result)
                res_rows["vm"] += [i] * len(vs)
                res_rows["vcpu"] += [v.id for v in vs]
                for k, col in cols.items():
                    res_rows.setdefault(k, []).extend(col)
                log = workload.items(vm, prog, vs)
                if log is not None:
                    f = pl.DataFrame({k: np.asarray(v) for k, v in log.items()})
                    item_frames.append(f.select(pl.lit(i, dtype=pl.Int64).alias("vm"), pl.all()))
            results = pl.DataFrame(res_rows)
            tf = None
            if tracer is not None:
                try:
                    start = int(rep["start_mono_ns"])
                    tf = tracer.frames(
                        start, start + int(rep["wall_ns"]), [(t["tid"], t["vm"], t["vcpu"]) for t in rep["threads"]]
                    )
                    tf.info["window_ns"] = int(rep["wall_ns"])
                finally:
                    tracer.close()
            timers = [t.native_id for t in stoppers if t.native_id]
            q = _run_quality(
                snap0, snap1, threads, drivers, samples, steal_time, quality_thresholds, tf, (census0, census1), timers
            )
            config = {
                "workload": workload.config(),
                "vms": vms,
                "vcpus": vcpus,
                "placement": {f"{k[0]}.{k[1]}": v for k, v in where.items()},
                "duration_s": duration_s,
                "sample_every_s": sample_every_s,
                "memory_mib": memory_mib,
                "halt_poll_ns": halt_poll_ns,
                "steal_time": steal_time,
                "scheduler": scheduler.config(),
                "provenance": provenance(),
            }
            r = Run(
                samples=samples,
                results=results,
                threads=threads,
                wall_s=wall,
                placement=where,
                config=config,
                quality=q,
            )
            if "schedule" in rep:
                r.schedule, r.spins, r.schedule_info = _schedule_frames(rep["schedule"])
            if item_frames:
                r.items = pl.concat(item_frames)
            if tf is not None:
                config["trace"] = {
                    "max_events": trace_max_events,
                    # the KVM tracepoints but those the run loop replaces (it times its vCPUs' exits)
                    "events": [
                        e
                        for e in tracing.EVENTS
                        if (trace_kvm_events and e not in tracing.RUN_LOOP_REPLACES) or not e.startswith("kvm:")
                    ]
                    + (["vcpulab:kvm_run"] if trace_kvm_events else []),
                }
                r.trace, r.wakeups, r.exits, r.halts, r.trace_info = tf.trace, tf.wakeups, tf.exits, tf.halts, tf.info
            if tf is not None and tf.info["truncated"]:
                warnings.warn(
                    tracing.TraceTruncatedWarning(
                        f"the trace of run({type(workload).__name__}, vcpus={vcpus}) is incomplete: "
                        f"{tf.describe_truncation()}; Run.quality was measured from the {q.source} counters instead "
                        "(raise trace_max_events, or shorten the run)"
                    ),
                    stacklevel=frames_in_package() + 1,
                )
            if warn_quality:
                # stack: Quality.warn <- run <- its wrappers (guard_panics, renamed) <- the caller, whose line it names
                q.warn(
                    f"run({type(workload).__name__}, vcpus={vcpus}, pcpus={sorted(vcpu_cpus)})",
                    stacklevel=frames_in_package() + 2,
                )  # Quality.warn's frame, then run's wrappers, then the caller
            return r
    finally:
        if tracer is not None:
            tracer.close()  # idempotent: stops and frees the trace on every path
        for vm in vm_objs:
            vm.close()


def _run_quality(
    snap0: Any,
    snap1: Any,
    threads: pl.DataFrame,
    drivers: Sequence[_Driver],
    samples: pl.DataFrame,
    steal_time: bool,
    thresholds: dict[str, float] | None,
    tf: tracing.TraceFrames | None = None,
    censuses: tuple[Census | None, Census | None] | None = None,
    timers: Sequence[int] = (),
) -> Quality:
    """The run's [`Quality`][vcpulab.quality.Quality]: vCPU threads (CPU time and
    run delay from the Rust report, over each thread's life) and host drivers
    count as the run's own; only the vCPU threads compete in the fair share of
    steal. With a trace, other tasks' time on the run's CPUs
    comes from it (exact) instead of cpuidle; without one, the cpuidle
    estimate is bounded by the other tasks' CPU time where the two
    ``censuses`` saw every task; the run created its vCPU and driver threads
    and its stop ``timers`` (thread ids) between them."""
    placement: dict[int, Sequence[int]] = {}
    cpu_ns: dict[int, int] = {}
    delay: dict[int, int] = {}
    for t in threads.iter_rows(named=True):
        placement[t["tid"]] = t["cpus"]
        cpu_ns[t["tid"]], delay[t["tid"]] = t["cpu_ns"], t["run_delay_ns"]
    for d in drivers:
        if d.tid and d.cpu_ns is not None:
            placement[d.tid] = d.cpus or sorted(_core.allowed_cpus())
            cpu_ns[d.tid], delay[d.tid] = d.cpu_ns, d.run_delay_ns
    steal: list[tuple[Sequence[int], float]] = []
    if steal_time and samples.height:
        s = samples.group_by(["vm", "vcpu"]).agg(
            (
                (pl.col("steal_ns").max() - pl.col("steal_ns").min()) / (pl.col("t_ns").max() - pl.col("t_ns").min())
            ).alias("f")
        )
        cpus_of = {(t["vm"], t["vcpu"]): t["cpus"] for t in threads.iter_rows(named=True)}
        steal = [(cpus_of[(r["vm"], r["vcpu"])], float(r["f"])) for r in s.iter_rows(named=True) if r["f"] == r["f"]]
    traced = None
    untrusted = tf.describe_truncation() if tf is not None else None
    if tf is not None and untrusted is None:
        # an incomplete trace says nothing exact about other tasks: the counters are used instead
        cpus = sorted({c for cl in threads["cpus"].to_list() for c in cl})
        traced = tracing.other_busy_ns(tf.trace, cpus, placement)
    q = quality(
        snap0,
        snap1,
        placement,
        own_cpu_ns=cpu_ns,
        own_run_delay_ns=delay,
        steal_fraction=steal,
        traced_other_ns=traced,
        traced_wall_ns=(tf.info["window_ns"] if tf is not None and traced is not None else None),
        vcpu_threads=threads["tid"].to_list(),
        census=censuses,
        born=[*placement, *timers],
        # this thread ran the run loop (and read the censuses)
        run_tids=[threading.get_native_id()],
        **(thresholds or {}),
    )
    return replace(q, trace_truncated=untrusted) if untrusted is not None else q


class _Driver(threading.Thread):
    """Runs a workload's host side (if any) beside the vCPUs, pinned to the
    host CPUs no vCPU uses (when there are such CPUs): a host sender spinning
    on a vCPU's CPU would stop KVM's halt polling there
    (``single_task_running()`` turns false) and distort what is measured."""

    def __init__(
        self, workload: Workload, vm: Vm, vcpus: list[Vcpu], prog: Program, duration: float, cpus: Sequence[int]
    ) -> None:
        super().__init__(daemon=True)
        self.args = (vm, vcpus, prog, duration)
        self.workload = workload
        self.cpus = list(cpus)
        self.result: Any = None
        self.error: BaseException | None = None
        self.tid = 0
        self.cpu_ns: int | None = None
        self.run_delay_ns = 0

    def run(self) -> None:
        import os

        from vcpulab.quality import thread_schedstat

        self.tid = threading.get_native_id()
        c0, d0, _ = thread_schedstat(self.tid)
        try:
            if self.cpus and type(self.workload).host_driver is not Workload.host_driver:
                os.sched_setaffinity(0, self.cpus)
            else:
                self.cpus = []
            self.result = self.workload.host_driver(*self.args)
        except BaseException as e:
            self.error = e
        finally:
            c1, d1, _ = thread_schedstat(self.tid)
            self.cpu_ns, self.run_delay_ns = c1 - c0, d1 - d0


def provenance() -> dict[str, Any]:
    """Where a real run came from ([`vcpulab.provenance.provenance`][]):
    vcpulab version and build, dependency versions, timestamp, command line,
    host CPU model, kernel, KVM module parameters, virtualization backend."""
    from vcpulab.provenance import provenance as _provenance

    return _provenance()


def machine_provenance() -> dict[str, Any]:
    """The machine part of provenance ([`vcpulab.provenance.machine`][])."""
    from vcpulab.provenance import machine

    return machine()
