"""The case model: a published comparison ([`Case`][vcpulab.validation.Case]) with its
[`Source`][vcpulab.validation.Source] and [`Published`][vcpulab.validation.Published] numbers, the metrics
and measures a case's value is formed from, what a builder may use ([`Ctx`][vcpulab.validation.Ctx]: the era's
and the cost profile's values, the published set-up as keywords) and the check that a case changes no era
value without a recorded reason ([`check_case`][vcpulab.validation.check_case])."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vcpulab.sim import halt_poll as hp
from vcpulab.sim._config import Config, Guest, HaltPoll, Host, Lock, Ple, Policy, Pv, Vm, Workload
from vcpulab.validation.eras import _GUEST_FIELDS, ERAS, CostProfile, Era

#: metric → how a case's value is formed from its configurations' measures
METRICS = {
    "throughput_change": "new / base - 1 of a throughput (more is better)",
    "wall_time_change": "new / base - 1 of a wall time or time per operation (less is better)",
    "latency_change": "new / base - 1 of a latency (less is better)",
    "ratio": "new / base of a throughput or of host CPU in C0",
    "share": "a share measured in one configuration",
}
_COMPARED = ("throughput_change", "wall_time_change", "latency_change", "ratio")


@dataclass(frozen=True)
class Source:
    """A public source: ``title`` (thread subject, commit or paper title),
    ``authors``, ``date`` (ISO, as precise as known), ``url`` (public)."""

    title: str
    authors: str
    date: str
    url: str

    def __post_init__(self) -> None:
        for f in ("title", "authors", "date", "url"):
            v = getattr(self, f)
            if not isinstance(v, str) or not v.strip():
                raise ValueError(f"Source.{f} must be a non-empty str, got {v!r}")
        if not self.url.startswith(("https://", "http://")):
            raise ValueError(f"Source.url must be a public http(s) URL, got {self.url!r}")


@dataclass(frozen=True)
class Published:
    """What the source states.

    Attributes:
        value: the metric's value as a fraction or ratio (``1.05`` for +105 %,
            ``3.88`` for a 3.88x ratio, ``0.01`` for a 1 % share); None when
            the source states only a direction (``sign``).
        text: the numbers as the source gives them, with units.
        unit: unit of ``base`` / ``new``.
        base, new: the two measured numbers where given (in ``unit``).
        low, high: a published range of the value (e.g. "4.6 %~14 %").
        sign: +1 / -1 when only a direction is published (``value`` None).
    """

    value: float | None
    text: str
    unit: str = ""
    base: float | None = None
    new: float | None = None
    low: float | None = None
    high: float | None = None
    sign: int = 0

    def __post_init__(self) -> None:
        if self.value is None and self.sign not in (-1, 1):
            raise ValueError("Published: a value, or a sign of +1/-1 for a direction-only result")
        if not self.text.strip():
            raise ValueError("Published.text must give the numbers as the source states them")
        if (self.base is None) != (self.new is None):
            raise ValueError("Published: give both base and new, or neither")
        if self.base is not None and not self.unit:
            raise ValueError("Published.unit must name the unit of base/new")


Builder = Callable[["Ctx", str, int], Any]
Measure = Callable[[Mapping[str, Any]], float]


@dataclass(frozen=True)
class Case:
    """One published comparison.

    Attributes:
        name: unique id (``snake_case``).
        title: what is compared, in a line.
        source: [`Source`][vcpulab.validation.Source].
        published: [`Published`][vcpulab.validation.Published].
        metric: a key of [`METRICS`][vcpulab.validation.METRICS].
        era: a key of [`vcpulab.validation.eras.ERAS`][vcpulab.validation.ERAS].
        build: ``build(ctx, variant, seed)`` → [`vcpulab.sim.Config`][] or
            [`vcpulab.sim.halt_poll.Scenario`][]; variants ``"base"`` and
            ``"new"`` (``"only"`` for a share). None: not expressible.
        measure: name of the measure taken from each run (see ``_MEASURES``).
        varies: ``"section.field"`` paths the comparison turns (the two
            variants may differ from the era there).
        overrides: ``{"section.field": (value, reason)}``: era values this
            case's published set-up changes, each with its reason.
        warmup_ns, measure_ns: nominal simulated warm-up and measured time
            (main engine; scaled by ``duration_scale``), or the halt-polling
            model's simulated time (``measure_ns``).
        setup: the published set-up in words (host, VMs, pinning).
        notes: modelling choices of the case (assumptions in the set-up).
        limitation: why the case is not expressible (``build`` None), or what
            today's model lacks for it.
        waits_for: the part of the simulator a closer match needs: ``"the host
            model"`` (the host scheduler: placement, load balancing, cache-cold
            migrations), ``"the guest model"`` (the guest kernel, its PV paths
            and the workloads' phases), or ``"the host and guest models"``.
    """

    name: str
    title: str
    source: Source
    published: Published
    metric: str
    era: str
    build: Builder | None
    measure: str = "throughput"
    varies: tuple[str, ...] = ()
    overrides: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    warmup_ns: int = 50_000_000
    measure_ns: int = 150_000_000
    setup: str = ""
    notes: str = ""
    limitation: str = ""
    waits_for: str = ""
    costs: str = "hardware"

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"Case {self.name}: metric must be one of {list(METRICS)}, got {self.metric!r}")
        if self.era not in ERAS:
            raise ValueError(f"Case {self.name}: era must be one of {list(ERAS)}, got {self.era!r}")
        if self.build is None and not self.limitation:
            raise ValueError(f"Case {self.name}: a case without a builder must state its limitation")
        if self.measure not in _MEASURES:
            raise ValueError(f"Case {self.name}: measure must be one of {list(_MEASURES)}, got {self.measure!r}")
        for path, ov in self.overrides.items():
            if not (isinstance(ov, tuple) and len(ov) == 2 and isinstance(ov[1], str) and len(ov[1].strip()) >= 10):
                raise ValueError(f"Case {self.name}: override {path!r} needs (value, reason) with a recorded reason")

    @property
    def variants(self) -> tuple[str, ...]:
        return ("only",) if self.metric == "share" else ("base", "new")

    @property
    def expressible(self) -> bool:
        return self.build is not None

    def era_obj(self) -> Era:
        """The case's era with its recorded overrides applied."""
        return ERAS[self.era].with_overrides(self.overrides) if self.overrides else ERAS[self.era]

    def ctx(self, costs: CostProfile, duration_scale: float = 1.0, length: float = 1.0) -> Ctx:
        return Ctx(self.era_obj(), costs, duration_scale, length, frozenset(self.varies), self)


@dataclass(frozen=True)
class Ctx:
    """What a builder may use: the era (with the case's recorded overrides),
    the cost profile, and the run's length. ``host()``, ``vm()``, ``pv()``…
    take the published set-up as keywords; a keyword that is an era or cost
    value raises ValueError unless the case lists it in ``varies``."""

    era: Era
    costs: CostProfile
    duration_scale: float
    length: float
    varies: frozenset[str]
    case: Case | None = None

    # ---- lengths
    def window(self) -> dict[str, int]:
        """``duration_ns`` and ``warmup_ns`` of a main-engine run: the case's
        warm-up (scaled), then its measured time (scaled, times ``length``)."""
        assert self.case is not None
        w = int(self.case.warmup_ns * self.duration_scale)
        m = max(1_000_000, int(self.case.measure_ns * self.duration_scale * self.length))
        return {"duration_ns": w + m, "warmup_ns": w}

    def count(self, n: int) -> int:
        """An iteration count scaled by the run's length."""
        return max(2, int(round(n * self.duration_scale * self.length)))

    # ---- objects
    def _merge(self, section: str, era_vals: Mapping[str, Any], setup: Mapping[str, Any]) -> dict[str, Any]:
        for k in setup:
            if k in era_vals and f"{section}.{k}" not in self.varies:
                raise ValueError(
                    f"case sets the era/cost value {section}.{k}; list it in Case.varies (the compared knob) "
                    "or in Case.overrides with a recorded reason"
                )
        return {**era_vals, **setup}

    def host(self, **setup: Any) -> Host:
        vals = {**self.era.values("host"), **self.costs.values("host")}
        return Host(**self._merge("host", vals, setup))

    def ple(self, **setup: Any) -> Ple:
        return Ple(**self._merge("ple", {**self.era.values("ple"), **self.costs.values("ple")}, setup))

    def pv(self, **setup: Any) -> Pv:
        return Pv(**self._merge("pv", {**self.era.values("pv"), **self.costs.values("pv")}, setup))

    def halt_poll(self, **setup: Any) -> HaltPoll:
        return HaltPoll(**self._merge("halt_poll", self.era.values("halt_poll"), setup))

    def program(self, name: str) -> Any:
        """The era's ``programs`` value ``name`` (a benchmark program's
        constant no source gives, shared by every case of the era);
        ValueError naming the era's values otherwise."""
        p = self.era.programs.get(name)
        if p is None:
            raise ValueError(f"era {self.era.name} has no programs value {name!r}; it has {sorted(self.era.programs)}")
        return p.value

    @property
    def lock_kind(self) -> str:
        return str(self.era.guest["lock_kind"].value)

    @property
    def policy(self) -> Policy:
        p = self.era.guest["policy"].value
        assert isinstance(p, Policy)
        return p

    def workload(self, w: Workload) -> Workload:
        """``w`` with the era's guest kernel: its spinlock kind for every
        spinlock phase (mutexes stay mutexes) and its workload constants."""
        phases = tuple(
            dataclasses.replace(p, lock_kind=self.lock_kind)
            if isinstance(p, Lock) and p.lock_kind != "mutex" and not p.lock_kind.startswith("rwsem")
            else p
            for p in w.phases
        )
        return dataclasses.replace(w, phases=phases, **self.era.values("workload"))

    def vm(
        self,
        *,
        workload: Workload,
        vcpus: int,
        count: int = 1,
        threads: int = 0,
        policy: Policy | None = None,
        pv: Mapping[str, Any] | None = None,
        halt_poll: Mapping[str, Any] | None = None,
        ple: Mapping[str, Any] | None = None,
        guest: Mapping[str, Any] | None = None,
    ) -> Vm:
        if policy is not None and "guest.policy" not in self.varies:
            raise ValueError("case sets the directed-yield policy; list 'guest.policy' in Case.varies")
        era_guest = {k: v for k, v in self.era.values("guest").items() if k in _GUEST_FIELDS}
        return Vm(
            vcpus=vcpus,
            count=count,
            threads=threads,
            workload=self.workload(workload),
            policy=policy if policy is not None else self.policy,
            ple=self.ple(**(ple or {})),
            pv=self.pv(**(pv or {})),
            halt_poll=self.halt_poll(**(halt_poll or {})),
            guest=Guest(**self._merge("guest", era_guest, guest or {})),
        )

    def config(self, host: Host, vms: Sequence[Vm], seed: int) -> Config:
        w = self.window()
        return Config(host=host, vms=tuple(vms), seed=seed, duration_ns=w["duration_ns"], warmup_ns=w["warmup_ns"])

    # ---- the one-CPU halt-polling model
    def hp_params(self, **setup: Any) -> HaltPoll:
        return HaltPoll(
            **{"policy": "block-time", **self._merge("halt_poll_model", self.era.values("halt_poll_model"), setup)}
        )

    def hp_scenario(self, params: HaltPoll, vcpus: Sequence[Any], seed: int) -> hp.Scenario:
        assert self.case is not None
        d = max(10_000_000, int(self.case.measure_ns * self.duration_scale * self.length))
        return hp.Scenario(params, vcpus=tuple(vcpus), costs=self.costs.costs(), duration_ns=d, seed=seed)


# ---- measures: run output (a dict of frames / values) → one number


def _tput(r: Mapping[str, Any]) -> float:
    return float(r["summary"]["throughput_ops_s"][0])


def _time_per_op(r: Mapping[str, Any]) -> float:
    t = _tput(r)
    return 1.0 / t if t > 0 else math.inf


def _wall(r: Mapping[str, Any]) -> float:
    return float(max(r["vms"]["wall_ns"].to_list()))


def _vm0_tput(r: Mapping[str, Any]) -> float:
    return float(r["vms"]["throughput_ops_s"][0])


def _yield_share(r: Mapping[str, Any]) -> float:
    s = r["summary"]
    ple = int(s["ple_exits"][0])
    return float(s["yield_ok"][0]) / ple if ple else math.nan


def _cpu_c0(r: Mapping[str, Any]) -> float:
    # the host CPU in C0: the vCPU threads' time and the host's wake-up path (halt_poll.Result.c0_ns)
    st = r["hp"]
    return min(1.0, float(st["c0_ns"].sum()) / max(1, int(r["hp_end_ns"])))


def _rtt_us(r: Mapping[str, Any]) -> float:
    return float(r["hp"]["rtt_median_us"][0])


_MEASURES: dict[str, Measure] = {
    "throughput": _tput,
    "time_per_op": _time_per_op,
    "wall_ns": _wall,
    "vm0_throughput": _vm0_tput,
    "yield_success_share": _yield_share,
    "cpu_c0": _cpu_c0,
    "rtt_us": _rtt_us,
}


# ------------------------------------------------------------ the check

_SIM_SECTIONS = {"host": Host, "ple": Ple, "pv": Pv, "halt_poll": HaltPoll}


def check_case(c: Case, costs: CostProfile | None = None, seed: int = 0) -> list[str]:
    """Differences between the configurations ``c`` builds and its era (with
    its recorded overrides) and cost profile that the case does not declare:
    a non-empty list means per-case tuning without a recorded reason. Builds
    every variant at full length; paths in ``c.varies`` may differ."""
    from vcpulab.validation.eras import COSTS

    if c.build is None:
        return []
    prof = costs or COSTS[c.costs]
    era = c.era_obj()
    out: list[str] = []
    try:
        built = {v: c.build(c.ctx(prof), v, seed) for v in c.variants}
    except ValueError as e:
        return [f"{c.name}: {e}"]
    expect: dict[str, Any] = {}
    for s in ("host", "ple", "pv", "halt_poll", "workload", "halt_poll_model"):
        for k, v in era.values(s).items():
            expect[f"{s}.{k}"] = v
    for s in ("host", "ple", "pv", "halt_poll_model"):
        for k, v in prof.values(s).items():
            expect[f"{s}.{k}"] = v
    for k, v in era.values("guest").items():
        if k in _GUEST_FIELDS:
            expect[f"guest.{k}"] = v
    expect["guest.policy"] = era.guest["policy"].value
    expect["guest.lock_kind"] = era.guest["lock_kind"].value
    for variant, cfg in built.items():
        got: dict[str, list[Any]] = {}
        if isinstance(cfg, Config):
            for k in era.values("host").keys() | prof.values("host").keys():
                got.setdefault(f"host.{k}", []).append(getattr(cfg.host, k))
            for vm in cfg.vms:
                for s in ("ple", "pv", "halt_poll"):
                    for k in {**era.values(s), **prof.values(s)}:
                        got.setdefault(f"{s}.{k}", []).append(getattr(getattr(vm, s), k))
                for k in era.values("workload"):
                    got.setdefault(f"workload.{k}", []).append(getattr(vm.workload, k))
                got.setdefault("guest.policy", []).append(vm.policy)
                for k in era.values("guest"):
                    if k in _GUEST_FIELDS:
                        got.setdefault(f"guest.{k}", []).append(getattr(vm.guest, k))
                for p in vm.workload.phases:
                    if isinstance(p, Lock) and p.lock_kind != "mutex" and not p.lock_kind.startswith("rwsem"):
                        got.setdefault("guest.lock_kind", []).append(p.lock_kind)
        elif isinstance(cfg, hp.Scenario):
            for k in era.values("halt_poll_model"):
                got.setdefault(f"halt_poll_model.{k}", []).append(getattr(cfg.halt_poll, k))
            for k in prof.values("halt_poll_model"):
                got.setdefault(f"halt_poll_model.{k}", []).append(getattr(cfg.costs, k))
        else:
            out.append(f"{c.name}/{variant}: the builder returned {type(cfg).__name__}, not a Config or Scenario")
            continue
        for path, vals in got.items():
            if path in c.varies or path not in expect:
                continue
            for v in vals:
                if v != expect[path]:
                    out.append(
                        f"{c.name}/{variant}: {path} = {v!r}, era/cost value {expect[path]!r}, no recorded reason"
                    )
                    break
    return out
