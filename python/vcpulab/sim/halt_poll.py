"""Simulated halt polling ([K3], [S5]).

The Rust model (``src/sim/halt_poll.rs``) follows ``kvm_vcpu_halt``: clamp the
per-vCPU window to the maximum at the start of each halt, poll until the wake
event, the end of the window, or another task becoming runnable on the CPU,
then block; count the kernel's stats where the kernel does; grow or shrink the
window by the policy. This module gives it validated configs with units,
defaults and sources, and returns polars frames whose stat columns are named
like the real vCPU stats (``vcpulab.experiment.Run.samples``)::

    from vcpulab import sim
    from vcpulab.sim import halt_poll as hp

    sc = hp.Scenario(sim.HaltPoll(policy="block-time", vm_max_ns=200_000),
                     vcpus=(hp.Message(gap_ns=50_000),), rounds=1000)
    r = hp.run(sc)
    r.stats            # one row per vCPU: halt_exits, halt_successful_poll, …
    hp.idle_study()    # [S5]: host CPU spent polling, by policy

Policies (``POLICIES``): ``"off"``, ``"fixed"`` (always poll up to the maximum,
Feb 2015), ``"dynamic-v3"`` (2015 v3: an idle vCPU's window oscillating
0 → 500 µs → … → 4 ms → 0 as the review describes it; reconstructed here),
``"dynamic-v4"`` (2015 v4: grow when the interrupt arrived while polling,
shrink when idle; never merged, reconstructed here), ``"block-time"``
(upstream since v4.3: decide from the length of the whole halt).

The configuration is [`vcpulab.sim.HaltPoll`][], the same type as the
engine's ``Vm.halt_poll`` (one Rust type, ``HaltPollConfig``, behind both).
``Params`` (this module's former class) is a deprecated alias.

Simplifications (see docs/halt_polling.md): one host CPU; FIFO among the vCPUs
that share it, no time slices; other host work is an on/off "another task is
runnable" process that never delays a vCPU; every halt's wake-up is valid
(x86); interrupt delivery, detection and wake-up are fixed costs plus an
optional exponential jitter.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import polars as pl

from vcpulab import _core
from vcpulab._checks import guard_panics
from vcpulab.sim._halt_poll_config import HALT_POLL_POLICIES, KERNEL_DEFAULTS, PARAM_OF_FIELD, HaltPoll, host_params

__all__ = [
    "Background",
    "Costs",
    "KERNEL_DEFAULTS",
    "LIMIT_NS",
    "MEASURED_HERE",
    "Message",
    "PARAM_OF_FIELD",
    "POLICIES",
    "Params",
    "Result",
    "STAT_COLUMNS",
    "Scenario",
    "Timer",
    "U32_MAX",
    "host_params",
    "idle_study",
    "run",
    "sweep",
    "windows",
]

# host_params is defined beside HaltPoll (HaltPoll.from_host reads it), public here: reprs and the docs say
# vcpulab.sim.halt_poll.host_params, as before #25
host_params.__module__ = __name__

#: The policy names (the engine's [`vcpulab.sim.HaltPoll`][] uses the same).
POLICIES = HALT_POLL_POLICIES

#: the kernel's halt-polling vCPU stats ([K3]), same names as real KVM
STAT_COLUMNS = (
    "halt_exits",
    "halt_successful_poll",
    "halt_attempted_poll",
    "halt_poll_invalid",
    "halt_wakeup",
    "halt_poll_success_ns",
    "halt_poll_fail_ns",
    "halt_wait_ns",
)

#: the largest value of a u32 module parameter (``halt_poll_ns`` and its grow / shrink factors)
U32_MAX = 2**32 - 1
#: the largest time any field of the model takes, ns (10^13 ns: about 2.8 hours)
LIMIT_NS = 10**13


def _check_int(obj: Any, name: str, lo: int = 0, hi: int = LIMIT_NS, optional: bool = False) -> None:
    v = getattr(obj, name)
    cls = type(obj).__name__
    if optional and v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{cls}.{name} must be an int{' or None' if optional else ''}, got {v!r}")
    if not lo <= int(v) <= hi:
        raise ValueError(f"{cls}.{name} must be in [{lo}, {hi}], got {v}")


# ------------------------------------------------------------------ configs


def Params(
    policy: str = "block-time",
    halt_poll_ns: int | None = None,
    grow: int | None = None,
    grow_start: int | None = None,
    shrink: int | None = None,
    vm_max_ns: int | None = None,
    poll_allowed: bool = True,
    v4_start_ns: int | None = None,
    v4_idle_ns: int = 10_000_000,
    v3_start_ns: int = 500_000,
) -> HaltPoll:
    """Deprecated: use [`vcpulab.sim.HaltPoll`][], the one halt-polling
    configuration of the engine and this model.

    Builds the equivalent ``HaltPoll`` (``halt_poll_ns`` is ``max_ns``,
    ``grow_start`` is ``grow_start_ns``; module parameters left None are the
    host's, as [`HaltPoll.from_host`][vcpulab.sim.HaltPoll.from_host] reads them; the default policy is
    ``"block-time"``) and warns with a DeprecationWarning."""
    warnings.warn(
        "vcpulab.sim.halt_poll.Params is deprecated; use vcpulab.sim.HaltPoll (halt_poll_ns -> max_ns, "
        "grow_start -> grow_start_ns; HaltPoll.from_host(...) reads the host's module parameters)",
        DeprecationWarning,
        stacklevel=2,
    )
    return HaltPoll.from_host(
        policy=policy,
        max_ns=halt_poll_ns,
        grow=grow,
        grow_start_ns=grow_start,
        shrink=shrink,
        vm_max_ns=vm_max_ns,
        poll_allowed=poll_allowed,
        v4_start_ns=v4_start_ns,
        v4_idle_ns=v4_idle_ns,
        v3_start_ns=v3_start_ns,
    )


@dataclass(frozen=True)
class Message:
    """Interrupts from a host sender, as the real MSI ping-pong
    (``vcpulab.experiment.MsiPingPong``): after each "about to halt" cue of the
    guest the sender waits ``gap_ns`` more and sends one MSI.

    Attributes:
        gap_ns: the wait after the cue, ns (default 50000, the foundation test's gap).
        exponential: draw each gap from an exponential distribution with mean
            ``gap_ns`` instead (default False).
    """

    gap_ns: int = 50_000
    exponential: bool = False

    def __post_init__(self) -> None:
        _check_int(self, "gap_ns", 0, LIMIT_NS)
        if not isinstance(self.exponential, bool):
            raise ValueError(f"Message.exponential must be a bool, got {self.exponential!r}")

    def _plain(self) -> dict[str, Any]:
        return {"kind": "message", "gap_ns": int(self.gap_ns), "exponential": self.exponential}


@dataclass(frozen=True)
class Timer:
    """A periodic guest timer: the idle ticking guest of [S5]
    (``vcpulab.experiment.IdleTicks``). ``hz``: ticks per second (default 250)."""

    hz: int = 250

    def __post_init__(self) -> None:
        _check_int(self, "hz", 1, 1_000_000)

    def _plain(self) -> dict[str, Any]:
        return {"kind": "timer", "hz": int(self.hz)}


#: Costs measured by ``vcpulab.calibrate.halt_poll`` on the project's machine
#: (kvm_pvm: every guest instruction emulated; 2 CPUs; vCPU on CPU 1, sender on
#: CPU 0; 2026-11-29 22:36 UTC, load average 0.6). Re-measure on yours: ``calibrate.halt_poll().costs``.
MEASURED_HERE: dict[str, int] = {
    "wake_to_cue_ns": 19_600,  # measured
    "cue_to_halt_ns": 4_650,  # measured
    "cue_observe_ns": 200,  # default, below resolution
    "deliver_ns": 3_000,  # default: only deliver - cue_to_halt and deliver + wake_to_cue are identifiable
    "poll_detect_ns": 200,  # default, below resolution
    "wake_latency_ns": 27_200,  # measured
    "wake_jitter_ns": 0,  # default
}


@dataclass(frozen=True)
class Costs:
    """Host and guest costs, ns. Defaults: [`MEASURED_HERE`][vcpulab.sim.halt_poll.MEASURED_HERE], measured by
    [`vcpulab.calibrate.halt_poll`][] on the project's machine; pass
    ``calibrate.halt_poll(...).costs`` to use this host's.

    Attributes:
        wake_to_cue_ns: halt end → the guest announces its next halt (VM entry,
            interrupt handler, the loop; emulated instructions here). Measured.
        cue_to_halt_ns: the cue → ``kvm_vcpu_halt`` starts (remaining
            instructions and the HLT exit). Measured (from the halt length of
            caught wake-ups).
        cue_observe_ns: the sender sees the cue → starts waiting the gap
            (a spinning reader; default 200, not measured).
        deliver_ns: the MSI ioctl → the interrupt is pending. Measured
            (``KVM_SIGNAL_MSI`` time).
        poll_detect_ns: pending interrupt → the poll loop notices it (one loop
            iteration; default 200, not measured).
        wake_latency_ns: a blocked vCPU made runnable → running again in
            ``kvm_vcpu_halt`` on an idle CPU (scheduler wake-up, context switch).
            Measured (halt length of blocked halts minus that of caught ones).
        wake_jitter_ns: mean of an exponential extra delay per wake-up (host
            noise; default 0).
    """

    wake_to_cue_ns: int = MEASURED_HERE["wake_to_cue_ns"]
    cue_to_halt_ns: int = MEASURED_HERE["cue_to_halt_ns"]
    cue_observe_ns: int = MEASURED_HERE["cue_observe_ns"]
    deliver_ns: int = MEASURED_HERE["deliver_ns"]
    poll_detect_ns: int = MEASURED_HERE["poll_detect_ns"]
    wake_latency_ns: int = MEASURED_HERE["wake_latency_ns"]
    wake_jitter_ns: int = MEASURED_HERE["wake_jitter_ns"]

    def __post_init__(self) -> None:
        for f in self.__dataclass_fields__:
            _check_int(self, f, 0, LIMIT_NS)
        if self.wake_to_cue_ns + self.cue_to_halt_ns == 0:
            raise ValueError(
                "Costs.wake_to_cue_ns + Costs.cue_to_halt_ns must be > 0 (a vCPU needs time between halts)"
            )

    def _plain(self) -> dict[str, Any]:
        return {k: int(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Background:
    """Other host work on the vCPUs' CPU: alternating busy periods (another
    task is runnable there, so polling stops at once) and idle periods, both
    exponential.

    Attributes:
        busy_ns: mean busy period, ns (default 10 ms: a CPU-bound neighbour
            such as a compiler; assumed, not measured).
        idle_ns: mean idle period, ns.
    """

    busy_ns: int = 10_000_000
    idle_ns: int = 10_000_000

    def __post_init__(self) -> None:
        _check_int(self, "busy_ns", 1, LIMIT_NS)
        _check_int(self, "idle_ns", 1, LIMIT_NS)

    @classmethod
    def from_fraction(cls, busy_fraction: float, busy_ns: int = 10_000_000) -> Background | None:
        """The process with busy share ``busy_fraction`` (0..1) and mean busy
        period ``busy_ns``; None for 0 (no other work)."""
        if (
            isinstance(busy_fraction, bool)
            or not isinstance(busy_fraction, (int, float))
            or not 0 <= busy_fraction <= 1
        ):
            raise ValueError(f"busy_fraction must be a number in [0, 1], got {busy_fraction!r}")
        if busy_fraction <= 1e-3:
            return None
        f = min(float(busy_fraction), 0.999)
        return cls(busy_ns=int(busy_ns), idle_ns=max(1, int(busy_ns * (1 - f) / f)))

    @property
    def fraction(self) -> float:
        return self.busy_ns / (self.busy_ns + self.idle_ns)

    def _plain(self) -> dict[str, Any]:
        return {"busy_ns": int(self.busy_ns), "idle_ns": int(self.idle_ns)}


@dataclass(frozen=True)
class Scenario:
    """vCPUs halting on one host CPU.

    Attributes:
        halt_poll: the policy and parameters ([`vcpulab.sim.HaltPoll`][]).
            Default ``HaltPoll(policy="block-time")`` (the kernel's defaults;
            ``HaltPoll.from_host(policy="block-time")`` takes this host's).
        vcpus: one [`Message`][vcpulab.sim.halt_poll.Message] or [`Timer`][vcpulab.sim.halt_poll.Timer] per vCPU (all on one host CPU).
        costs: [`Costs`][vcpulab.sim.halt_poll.Costs].
        background: other work on the CPU ([`Background`][vcpulab.sim.halt_poll.Background]), None: none.
        duration_ns: simulated time limit, ns (0: none; required with timers).
        rounds: round trips per message-driven vCPU (0: until duration_ns).
        seed: RNG seed (exponential gaps, jitter, background); deterministic per seed.
        trace: keep one row per halt ([`Result.trace`][vcpulab.sim.halt_poll.Result]).
    """

    halt_poll: HaltPoll = field(default_factory=lambda: HaltPoll(policy="block-time"))
    vcpus: Sequence[Message | Timer] = (Message(),)
    costs: Costs = field(default_factory=Costs)
    background: Background | None = None
    duration_ns: int = 0
    rounds: int = 0
    seed: int = 0
    trace: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.halt_poll, HaltPoll):
            raise ValueError(f"Scenario.halt_poll must be a vcpulab.sim.HaltPoll, got {self.halt_poll!r}")
        object.__setattr__(self, "vcpus", tuple(self.vcpus))
        if not self.vcpus or not all(isinstance(v, (Message, Timer)) for v in self.vcpus):
            raise ValueError(f"Scenario.vcpus must be a non-empty sequence of Message / Timer, got {self.vcpus!r}")
        if not isinstance(self.costs, Costs):
            raise ValueError(f"Scenario.costs must be a Costs, got {self.costs!r}")
        if self.background is not None and not isinstance(self.background, Background):
            raise ValueError(f"Scenario.background must be a Background or None, got {self.background!r}")
        _check_int(self, "duration_ns", 0, LIMIT_NS)
        _check_int(self, "rounds", 0, 100_000_000)
        _check_int(self, "seed", 0, 2**64 - 1)
        if self.duration_ns == 0 and self.rounds == 0:
            raise ValueError("Scenario.duration_ns or Scenario.rounds must be > 0 (the run must end)")
        if self.duration_ns == 0 and any(isinstance(v, Timer) for v in self.vcpus):
            raise ValueError("Scenario.duration_ns must be > 0 with Timer vCPUs")
        if not isinstance(self.trace, bool):
            raise ValueError(f"Scenario.trace must be a bool, got {self.trace!r}")

    def to_json(self) -> str:
        return json.dumps(
            {
                "halt_poll": self.halt_poll.to_dict(),
                "vcpus": [v._plain() for v in self.vcpus],
                "costs": self.costs._plain(),
                "background": None if self.background is None else self.background._plain(),
                "duration_ns": int(self.duration_ns),
                "rounds": int(self.rounds),
                "seed": int(self.seed),
                "trace": self.trace,
            }
        )


# ------------------------------------------------------------------ results


@dataclass
class Result:
    """What [`run`][vcpulab.sim.halt_poll.run] returns.

    ``stats``: one row per vCPU with the kernel stat columns
    ([`STAT_COLUMNS`][vcpulab.sim.halt_poll.STAT_COLUMNS]), grows/shrinks, ``poll_cpu_ns`` (host CPU time in
    the poll loop), ``busy_ns`` (host CPU time of the vCPU thread),
    ``poll_cpu_frac`` / ``busy_frac`` (of the simulated time),
    ``final_halt_poll_ns``, ``mean_window_ns``, ``success_frac``
    (halt_successful_poll / halt_exits), rounds, ``rtt_median_us`` /
    ``rtt_p99_us`` (MSI sent → next cue, like the real experiment) and
    ``wake_latency_median_us`` / ``wake_latency_mean_us`` (interrupt pending →
    vCPU back from the halt), ``c0_ns`` / ``c0_frac``: the host CPU's time in
    C0 for this vCPU — the vCPU thread's time (``busy_ns``) plus, per
    wake-up from a blocked halt (``halt_wakeup``), the host's wake-up path
    (``Costs.wake_latency_ns``: interrupt, wake-up, context switch, back into
    ``kvm_vcpu_halt``), which the CPU executes too; the measure of the
    published "%c0" comparisons (simplification: the block path after the
    HLT exit and host housekeeping are not counted; ``c0_frac`` is capped at 1).
    """

    stats: pl.DataFrame
    trace: pl.DataFrame | None
    rtt_ns: list[np.ndarray]
    wake_latency_ns: list[np.ndarray]
    end_ns: int
    background_ns: int
    scenario: Scenario


def _q(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if len(a) else math.nan


def _result(sc: Scenario, d: dict[str, Any]) -> Result:
    v = {k: np.asarray(x) for k, x in d["vcpus"].items()}
    n = len(v["halt_exits"])
    end = max(int(d["end_ns"]), 1)
    rtt = [np.asarray(a) for a in d["rtt_ns"]]
    lat = [np.asarray(a) for a in d["wake_latency_ns"]]
    stats = pl.DataFrame({"vcpu": np.arange(n, dtype=np.int64), **v}).with_columns(
        (pl.col("poll_cpu_ns") / end).alias("poll_cpu_frac"),
        (pl.col("busy_ns") / end).alias("busy_frac"),
        (pl.col("busy_ns") + pl.col("halt_wakeup") * int(sc.costs.wake_latency_ns)).alias("c0_ns"),
        ((pl.col("busy_ns") + pl.col("halt_wakeup") * int(sc.costs.wake_latency_ns)) / end)
        .clip(upper_bound=1.0)
        .alias("c0_frac"),
        (pl.col("halt_successful_poll") / pl.col("halt_exits").clip(lower_bound=1)).alias("success_frac"),
        pl.Series("rtt_median_us", [_q(a, 50) / 1e3 for a in rtt]),
        pl.Series("rtt_p99_us", [_q(a, 99) / 1e3 for a in rtt]),
        pl.Series("wake_latency_median_us", [_q(a, 50) / 1e3 for a in lat]),
        pl.Series("wake_latency_mean_us", [float(a.mean()) / 1e3 if len(a) else math.nan for a in lat]),
    )
    trace = pl.DataFrame({k: np.asarray(x) for k, x in d["trace"].items()}) if "trace" in d else None
    return Result(stats, trace, rtt, lat, int(d["end_ns"]), int(d["background_ns"]), sc)


@guard_panics
def run(scenario: Scenario) -> Result:
    """Simulates one [`Scenario`][vcpulab.sim.halt_poll.Scenario] (GIL released; deterministic per seed)."""
    if not isinstance(scenario, Scenario):
        raise ValueError(f"run needs a Scenario, got {scenario!r}")
    return _result(scenario, _core.halt_poll_simulate(scenario.to_json()))


@guard_panics
def sweep(scenarios: Sequence[Scenario], labels: Sequence[dict[str, Any]] | None = None) -> pl.DataFrame:
    """Simulates many scenarios in parallel; one frame of their ``stats`` rows,
    each prefixed with its label columns (``labels[i]``, default ``{"scenario": i}``)."""
    scenarios = list(scenarios)
    if not all(isinstance(s, Scenario) for s in scenarios):
        raise ValueError("sweep needs a sequence of Scenario")
    if labels is not None and len(labels) != len(scenarios):
        raise ValueError(f"labels needs one entry per scenario ({len(scenarios)}), got {len(labels)}")
    outs = _core.halt_poll_simulate_many([s.to_json() for s in scenarios])
    frames = []
    for i, (s, d) in enumerate(zip(scenarios, outs)):
        st = _result(s, d).stats
        lab = labels[i] if labels is not None else {"scenario": i}
        lits = [
            pl.lit(val, dtype=pl.Int64 if isinstance(val, int) and not isinstance(val, bool) else None).alias(k)
            for k, val in lab.items()
        ]
        frames.append(st.select([*lits, *st.columns]))
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


@guard_panics
def windows(params: HaltPoll, halts: Sequence[tuple[int, bool]]) -> list[int]:
    """The window (ns) each of a sequence of halts starts with under ``params``;
    each halt is (its whole length in ns, whether the wake-up came while
    polling). A direct check of the grow/shrink rules."""
    if not isinstance(params, HaltPoll):
        raise ValueError(f"windows needs a vcpulab.sim.HaltPoll, got {params!r}")
    hs = []
    for i, h in enumerate(halts):
        if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], int) and h[0] >= 0):
            raise ValueError(f"halts[{i}] must be (length_ns >= 0, caught: bool), got {h!r}")
        hs.append((int(h[0]), bool(h[1])))
    return list(_core.halt_poll_windows(json.dumps(params.to_dict()), hs))


# ------------------------------------------------------------------ idle study


@guard_panics
def idle_study(
    max_poll_ns: int | None = None,
    policies: Sequence[str] = POLICIES,
    idle_hz: Sequence[int] = (250, 1000),
    gaps_ns: Sequence[int] = (10_000, 20_000, 50_000, 100_000, 300_000, 1_000_000),
    duration_ns: int = 1_000_000_000,
    costs: Costs | None = None,
    seed: int = 0,
) -> pl.DataFrame:
    """Digest §5 in the simulator: an idle ticking guest (``idle_hz``) and a
    message-passing guest (``gaps_ns``), one vCPU on its own host CPU, under
    each policy with maximum ``max_poll_ns`` (default: the host's
    ``halt_poll_ns``; the 250 Hz measurement of [S5] used 2 ms).

    One row per (workload, policy): ``poll_cpu_frac`` (host CPU in the poll
    loop / wall time), ``busy_frac`` (all host CPU of the vCPU thread, the
    analogue of [S5]'s "C0"), ``success_frac``, ``wake_latency_median_us``
    / ``_mean_us``, ``mean_window_ns``, ``final_halt_poll_ns``.
    """
    mx = host_params()["halt_poll_ns"] if max_poll_ns is None else max_poll_ns
    c = costs or Costs()
    scs, labels = [], []
    loads: list[tuple[str, Message | Timer, float]] = [(f"idle {hz} Hz", Timer(hz), float("nan")) for hz in idle_hz]
    loads += [(f"message {g / 1000:g} us", Message(gap_ns=g), g / 1000) for g in gaps_ns]
    for name, w, gap in loads:
        for p in policies:
            scs.append(
                Scenario(HaltPoll(policy=p, vm_max_ns=mx), vcpus=(w,), costs=c, duration_ns=duration_ns, seed=seed)
            )
            labels.append({"workload": name, "gap_us": gap, "policy": p, "max_poll_ns": mx})
    cols = [
        "workload",
        "gap_us",
        "policy",
        "max_poll_ns",
        "poll_cpu_frac",
        "busy_frac",
        "success_frac",
        "wake_latency_median_us",
        "wake_latency_mean_us",
        "mean_window_ns",
        "final_halt_poll_ns",
        "halt_exits",
        "halt_successful_poll",
        "halt_poll_fail_ns",
    ]
    return sweep(scs, labels).select(cols)
