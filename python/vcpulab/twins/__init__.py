"""Twins: every real-KVM experiment has a simulated twin, calibrated on this host.

A real experiment ([`vcpulab.experiment.run`][]: a guest program on N vCPUs
pinned to host CPUs) and its *twin* (a [`vcpulab.sim.Config`][] of the same
experiment) are run side by side and compared metric by metric::

    from vcpulab import twins
    from vcpulab.experiment import SpinLock

    cal = twins.calibrate()                        # ~10 s of real KVM, cached per process
    exp = twins.Experiment(SpinLock(kind="ticket", hold=50, think=50), vcpus=3, pcpus=(0,))
    cfg = twins.twin(exp, cal)                     # the simulated configuration
    cmp = twins.compare(exp, trials=3, seeds=3)    # polars: metric, real ± CI, sim ± CI, rel_err, …
    print(cmp.select("metric", "unit", "real", "sim", "rel_err"))  # the frame has ~30 columns

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
* the host's speed over time ([`speed_probe`][vcpulab.twins.speed_probe], part of a
  calibration): each CPU's fast and slow states and how long they last, the
  twin's [`HostSpeed`][vcpulab.sim.HostSpeed];
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
Under vcpulab's schedulers [`compare_schedules`][vcpulab.twins.compare_schedules] compares the two
decision logs (``Run.schedule``, ``sim.Result.schedule``) reason by reason:
decisions per second and the token holds that end in each.
"""

from __future__ import annotations

from vcpulab.twins._calibration import (
    COST_REPEATS,
    HALT_WAKE_CAL_POLL_NS,
    IPI_OUTSIDE_INSNS,
    SPEED_PROBE_S,
    WAKE_POLL_CAL_CHECKS,
    blocked_halt_ns,
    calibrate,
    ipi_pair_median,
    ipi_wake_spread_of,
)
from vcpulab.twins._distributions import (
    TRACE_COLUMNS,
    WAKEUP_COLUMNS,
    distributions,
    sim_trace_frames,
    sim_wakeups,
    vcpu_slices,
)
from vcpulab.twins._experiment import Experiment
from vcpulab.twins._grid import (
    DIRECTION_METRICS,
    FACTORS,
    MIN_COST_PAIRS,
    MSI_DEADLINE_S,
    WAKE_HALT_POLL_MULTIPLE,
    Grid,
    cell_factors,
    cell_name,
    coscheduling_grid,
    default_grid,
    directions,
    grid,
    policy_grid,
    wake_placement_grid,
    wake_work,
)
from vcpulab.twins._guest import (
    HALT_BRACKET_INSNS,
    IRQ_STUB_INSNS,
    PV_SPIN_ITER_INSNS_NO_WINDOW,
    WAKE_POLL_ITER_INSNS,
    guest_path,
)
from vcpulab.twins._load import OtherLoad
from vcpulab.twins._metrics import METRICS, real_metrics, real_steal_intervals, sim_metrics, sim_steal_intervals
from vcpulab.twins._running import (
    EMULATION_COST_KEYS,
    FLOORS,
    SPEED_EDGE_GAIN,
    SPEED_SHARE_FLOOR,
    compare,
    ks_distance,
    median_costs,
    run_both,
    run_real,
    run_sim,
    scaled_costs,
    speed_gain,
)
from vcpulab.twins._schedule import SCHEDULE_COLUMNS, compare_schedules, token_holds
from vcpulab.twins._speed import SLOW_THRESHOLD, SPEED_KEYS, SpeedProbe, fit_speed, host_speed_of, speed_probe
from vcpulab.twins._twin import (
    PV_SPIN_ITER_INSNS,
    SPIN_PHASE_DIST,
    TWIN_MAX_MACHINE_CPUS,
    background_for,
    host_load_for,
    start_gap_of,
    twin,
    twin_machine_cpus,
    vcpu_start_of,
    wake_poll_iter_ns,
)
from vcpulab.twins._values import (
    CALIBRATION_FORMAT,
    REFERENCE_CALIBRATION,
    Calibration,
    Value,
    host_knobs,
    reference_calibration,
)

# private, used by tests/test_attach_reliability.py (debugfs mounted by mount(2), never by a program from PATH)
from vcpulab.twins._values import _mount_debugfs as _mount_debugfs

__all__ = [
    "CALIBRATION_FORMAT",
    "COST_REPEATS",
    "WAKE_POLL_CAL_CHECKS",
    "Calibration",
    "DIRECTION_METRICS",
    "EMULATION_COST_KEYS",
    "Experiment",
    "FACTORS",
    "FLOORS",
    "SPEED_EDGE_GAIN",
    "SPEED_SHARE_FLOOR",
    "Grid",
    "HALT_BRACKET_INSNS",
    "IPI_OUTSIDE_INSNS",
    "IRQ_STUB_INSNS",
    "WAKE_POLL_ITER_INSNS",
    "wake_poll_iter_ns",
    "METRICS",
    "MIN_COST_PAIRS",
    "MSI_DEADLINE_S",
    "OtherLoad",
    "PV_SPIN_ITER_INSNS",
    "PV_SPIN_ITER_INSNS_NO_WINDOW",
    "REFERENCE_CALIBRATION",
    "SPIN_PHASE_DIST",
    "SLOW_THRESHOLD",
    "SPEED_KEYS",
    "SPEED_PROBE_S",
    "SpeedProbe",
    "fit_speed",
    "host_speed_of",
    "speed_probe",
    "TRACE_COLUMNS",
    "TWIN_MAX_MACHINE_CPUS",
    "Value",
    "WAKEUP_COLUMNS",
    "background_for",
    "calibrate",
    "ipi_pair_median",
    "HALT_WAKE_CAL_POLL_NS",
    "blocked_halt_ns",
    "ipi_wake_spread_of",
    "cell_factors",
    "cell_name",
    "compare",
    "compare_schedules",
    "SCHEDULE_COLUMNS",
    "token_holds",
    "coscheduling_grid",
    "default_grid",
    "policy_grid",
    "wake_placement_grid",
    "WAKE_HALT_POLL_MULTIPLE",
    "wake_work",
    "directions",
    "distributions",
    "grid",
    "guest_path",
    "host_knobs",
    "host_load_for",
    "ks_distance",
    "median_costs",
    "real_metrics",
    "real_steal_intervals",
    "reference_calibration",
    "run_both",
    "run_real",
    "run_sim",
    "scaled_costs",
    "sim_metrics",
    "sim_steal_intervals",
    "sim_trace_frames",
    "sim_wakeups",
    "speed_gain",
    "start_gap_of",
    "twin",
    "twin_machine_cpus",
    "vcpu_slices",
    "vcpu_start_of",
]
