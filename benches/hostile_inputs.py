"""Hostile inputs to vcpulab's public API (issue #24): every outcome classified.

    python benches/hostile_inputs.py            # every case (a few minutes)
    python benches/hostile_inputs.py --quick    # a seeded sample (under a minute)
    python benches/hostile_inputs.py --only sim.Host,kvm.attach --json out.json

Each *case* is one public entry point, one of its parameters and one hostile
value (None, bools, -1, 0, 2**63, 2**64, 10**30, nan, ±inf, -0.0, 1e308, 0.5,
'x', '', '1', b'x', lists / dicts of the wrong shape, object(), numpy
scalars of the parameter's good value, CPU numbers 99 and 2**20, a wrong
enum name), the other arguments valid. Per parameter a *spec* says which of
those values are valid (numpy integers are valid ints, np.float32 a valid
float; ``0`` is valid where the range holds it). Outcomes:

* **clean**: an invalid value raised TypeError / ValueError / LookupError /
  OSError / a vcpulab error (``vcpulab.VcpulabError``) whose message names the
  parameter (its name, case-insensitively; a config field's ``Class.field``
  contains it);
* **accepted**: a valid value ran (counted apart: not a failure);
* **refused**: a valid value was refused with one of those types (listed, so
  that a spec or the API can be corrected);
* **silent**: an invalid value was accepted without an exception, or reached
  real work (``twins.compare`` / ``grid`` must refuse before any calibration or
  real trial: ``experiment.run`` and ``twins.calibrate`` are fenced during
  those calls, and a refusal after 1 s counts as silent too);
* **unclear**: another exception type (RuntimeError, AttributeError,
  OverflowError, PanicException …) or a message that does not name the
  parameter;
* **hang**: the call outlived its timeout; **crash**: the process died.

Cases run in worker subprocesses, one per module group; a worker announces
each case before it starts it, so a hang (the worker is killed) or a crash is
attributed to its case and the worker restarts after it. The clean percentage
is over the invalid values only. ``--quick`` draws a fixed-seed sample of
each parameter's values (``--seed``); both modes are deterministic in the
cases they run.

Real-KVM calls stay short: experiments run 0.02 s, an attached target is a
child process holding one idle VM, and ``calibrate.halt_poll`` stops at its
first real measurement (its valid values are counted as accepted there).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- values

#: the hostile values every parameter gets, by name (the name is what reports show)
GENERIC: dict[str, Callable[[], Any]] = {
    "None": lambda: None,
    "True": lambda: True,
    "False": lambda: False,
    "-1": lambda: -1,
    "0": lambda: 0,
    "2**63": lambda: 2**63,
    "2**64": lambda: 2**64,
    "10**30": lambda: 10**30,
    "nan": lambda: math.nan,
    "inf": lambda: math.inf,
    "-inf": lambda: -math.inf,
    "-0.0": lambda: -0.0,
    "1e308": lambda: 1e308,
    "0.5": lambda: 0.5,
    "'x'": lambda: "x",
    "''": lambda: "",
    "'1'": lambda: "1",
    "b'x'": lambda: b"x",
    "[]": list,
    "['x']": lambda: ["x"],
    "[[1, 2]]": lambda: [[1, 2]],
    "{}": dict,
    "{'x': 1}": lambda: {"x": 1},
    "object()": lambda: object(),
}
#: CPU-number parameters also get these
CPU_EXTRA: dict[str, Callable[[], Any]] = {"99": lambda: 99, "2**20": lambda: 2**20}
#: enumerated (string) parameters also get a wrong name and the good name in capitals
ENUM_EXTRA = ("'bogus'", "'UPPER'")


@dataclass(frozen=True)
class Spec:
    """Which values a parameter takes."""

    kind: str  # int float bool enum cpu seq opt never pred any
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    names: tuple[str, ...] = ()
    inner: Spec | None = None
    min_len: int = 0
    pred: Callable[[Any], bool] | None = None

    def valid(self, v: Any, cpus: frozenset[int]) -> bool:
        k = self.kind
        if k == "opt":
            return v is None or (self.inner is not None and self.inner.valid(v, cpus))
        if k == "never":
            return False
        if k == "pred":
            return bool(self.pred and self.pred(v))
        if k == "bool":
            return isinstance(v, (bool, np.bool_))
        if k == "enum":
            return isinstance(v, str) and v in self.names
        if k in ("int", "cpu"):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                return False
            if k == "cpu":
                return int(v) in cpus
            return _in(int(v), self)
        if k == "float":
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                return False
            f = float(v)
            return math.isfinite(f) and _in(f, self)
        if k == "seq":
            if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
                return False
            return len(v) >= self.min_len and all(self.inner is None or self.inner.valid(x, cpus) for x in v)
        raise AssertionError(k)


def _in(x: float, s: Spec) -> bool:
    if s.lo is not None and (x < s.lo or (s.lo_open and x == s.lo)):
        return False
    return not (s.hi is not None and (x > s.hi or (s.hi_open and x == s.hi)))


def Int(lo: float | None = None, hi: float | None = None) -> Spec:
    return Spec("int", lo, hi)


def Float(lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False) -> Spec:
    return Spec("float", lo, hi, lo_open, hi_open)


def Bool() -> Spec:
    return Spec("bool")


def Enum(*names: str) -> Spec:
    return Spec("enum", names=tuple(names))


def Cpu() -> Spec:
    return Spec("cpu")


def Seq(inner: Spec | None = None, min_len: int = 0) -> Spec:
    return Spec("seq", inner=inner, min_len=min_len)


def Opt(inner: Spec) -> Spec:
    return Spec("opt", inner=inner)


def Never() -> Spec:
    return Spec("never")


def Pred(fn: Callable[[Any], bool]) -> Spec:
    return Spec("pred", pred=fn)


U32, U64 = 2**32 - 1, 2**64 - 1


@dataclass
class Param:
    """One parameter of a target: its spec, a good value (numpy variants are
    made from it; a callable gets the worker's context), what a message must
    name (default: the parameter's name up to ``[`` or ``.``) and extra values."""

    name: str
    spec: Spec
    good: Any = None
    names: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    #: only these values (names of GENERIC / extra, or raw strings with ``raw``)
    values: tuple[str, ...] | None = None
    raw: bool = False
    #: a valid value this slow is skipped (e.g. a real run of 0.5 s)
    skip_valid: Callable[[Any], bool] | None = None

    def message_names(self) -> tuple[str, ...]:
        if self.names:
            return self.names
        base = self.name.split("[", 1)[0]
        return (base,)

    def value_names(self) -> list[str]:
        if self.values is not None:
            return list(self.values)
        out = list(GENERIC)
        kinds = {self.spec.kind, self.spec.inner.kind if self.spec.inner else ""}
        if "cpu" in kinds:
            out += list(CPU_EXTRA)
        if "enum" in kinds:
            out += list(ENUM_EXTRA)
        if "int" in kinds or "cpu" in kinds:
            out.append("np.int64")
        if "float" in kinds:
            out += ["np.float32", "np.int64"]
        return out + list(self.extra)


@dataclass
class Target:
    """A public entry point: ``call(ctx, param_name, value)`` invokes it with
    that parameter replaced and the others valid."""

    group: str
    name: str
    params: list[Param]
    call: Callable[[Any, str, Any], Any]
    #: run valid values too (False: only invalid ones, e.g. calls that would start real trials)
    valid_ok: bool = True
    #: refusals must come before any real work (calibration, a real trial) and within 1 s
    before_real: bool = False
    #: exceptions that mean a valid value ran (a run_until that timed out)
    ran_exc: tuple[type[BaseException], ...] = ()


# --------------------------------------------------------------------------- the targets

CPUS = frozenset(os.sched_getaffinity(0))
#: a CPU this process may use, and another if there is one
CPU_A = max(CPUS)
CPU_B = min(CPUS)


def _kw(base: Mapping[str, Any], name: str, value: Any) -> dict[str, Any]:
    d = dict(base)
    d[name] = value
    return d


def _set_entry(base: Mapping[str, Any], pname: str, value: Any) -> dict[str, Any]:
    """``pcpus[0]`` → base with pcpus = [value]; ``placement[0][0]`` → [[value]]; a plain name → replaced."""
    if "[" not in pname:
        return _kw(base, pname, value)
    head, rest = pname.split("[", 1)
    depth = rest.count("[") + 1
    v: Any = value
    for _ in range(depth):
        v = [v]
    return _kw(base, head, v)


TARGETS: list[Target] = []


def target(group: str, name: str, params: list[Param], **kw: Any) -> Callable[[Callable[..., Any]], Any]:
    def deco(fn: Callable[[Any, str, Any], Any]) -> Callable[[Any, str, Any], Any]:
        TARGETS.append(Target(group, name, params, fn, **kw))
        return fn

    return deco


# --- twins ---------------------------------------------------------------------------------

_EXP_PARAMS = [
    Param("workload", Never(), names=("workload",)),
    Param("vcpus", Int(1, 256), 1),
    Param("pcpus", Seq(Int(0, 2**16), 1), (CPU_A,)),
    Param("pcpus[0]", Int(0, 2**16), CPU_A, names=("pcpus",), extra=tuple(CPU_EXTRA)),
    Param("pinning", Enum("shared", "one_each"), "one_each"),
    Param("duration_s", Float(0, 86397, lo_open=True), 0.02),
    Param("halt_poll_ns", Opt(Int(0, U32)), None),
]


def _exp(**kw: Any) -> Any:
    from vcpulab import experiment, twins

    base = dict(workload=experiment.SpinLock(), vcpus=1, pcpus=(CPU_A,), duration_s=0.02)
    base.update(kw)
    return twins.Experiment(**base)


@target("twins", "twins.calibrate", [Param("cpu", Opt(Cpu()), CPU_A), Param("refresh", Bool(), False)])
def _t_calibrate(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import twins

    assert ctx.cal is not None  # the default calibration first (cached per CPU)
    twins.calibrate(**{p: v})


@target("twins", "twins.Experiment", _EXP_PARAMS)
def _t_experiment(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import experiment

    base = dict(workload=experiment.SpinLock(), vcpus=1, pcpus=(CPU_A,), duration_s=0.02)
    _exp(**_set_entry(base, p, v))


@target(
    "twins",
    "twins.twin",
    [
        Param("exp", Never()),
        Param("cal", Opt(Never())),
        Param("seed", Int(0, U64), 0),
        Param("trace", Bool(), False),
        Param("other_share", Opt(Float(0, 1, hi_open=True)), 0.1),
        Param("other_burst_ns", Opt(Float(0, 1e9, lo_open=True)), 20_000.0),
        Param("other_load", Opt(Never())),
        Param("start_gap_ns", Opt(Float(0, 1e9)), 0.0),
    ],
)
def _t_twin(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import twins

    cfg = twins.twin(**_kw({"exp": _exp(), "cal": ctx.cal}, p, v))
    from vcpulab import _core

    _core.sim_validate(cfg.to_json())


_COMPARE_PARAMS = [
    Param("exp", Never()),
    Param("trials", Int(1, 1000), 1),
    Param("seeds", Int(1, 1000), 1),
    Param("cal", Opt(Never())),
    Param("real", Opt(Seq(Never(), 1))),
    Param("load", Enum("measured", "one_task", "none"), "none"),
    Param("trace", Bool(), False),
]


@target("twins", "twins.compare", _COMPARE_PARAMS, valid_ok=False, before_real=True)
def _t_compare(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import twins

    kw = _kw({"exp": _exp(), "trials": 1, "seeds": 1, "cal": ctx.cal, "load": "none"}, p, v)
    with ctx.fence():
        twins.compare(**kw)


@target(
    "twins",
    "twins.grid",
    [
        Param("experiments", Opt(Seq(Never()))),
        Param("trials", Int(1, 1000), 1),
        Param("seeds", Int(1, 1000), 1),
        Param("cal", Opt(Never())),
        Param("load", Enum("measured", "one_task", "none"), "none"),
        Param("progress", Opt(Bool()), False),  # None: a bar on a terminal only
        Param("trace", Bool(), False),
        Param("per_cell_calibration", Bool(), False),
    ],
    valid_ok=False,
    before_real=True,
)
def _t_grid(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import twins

    kw = _kw({"experiments": [_exp()], "trials": 1, "seeds": 1, "cal": ctx.cal, "load": "none"}, p, v)
    with ctx.fence():
        twins.grid(**kw)


# --- quality / tracing -----------------------------------------------------------------------


@target(
    "quality",
    "quality.snapshot",
    [
        Param("pcpus", Seq(Cpu()), [CPU_A]),
        Param("pcpus[0]", Cpu(), CPU_A, names=("pcpus",)),
        Param("tids", Seq(Int(1, 2**22)), []),
        Param("tids[0]", Int(1, 2**22), 1, names=("tids",)),
    ],
)
def _t_snapshot(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import quality

    quality.snapshot(**_set_entry({"pcpus": [CPU_A], "tids": []}, p, v))


_MAPPING_INT = Pred(
    lambda v: isinstance(v, dict) and all(isinstance(k, int) and isinstance(x, int) for k, x in v.items())
)


@target(
    "quality",
    "quality.quality",
    [
        Param("before", Never()),
        Param("after", Never()),
        Param("placement", Pred(lambda v: isinstance(v, dict) and not v), {}),
        Param("own_cpu_ns", Opt(_MAPPING_INT), None),
        Param("own_run_delay_ns", Opt(_MAPPING_INT), None),
        Param("steal_fraction", Seq(Never()), ()),
        Param("max_other_share", Float(0, 1), 0.02),
        Param("max_alone_delay_share", Float(0, 1), 0.02),
        Param("traced_other_ns", Opt(_MAPPING_INT), None),
        Param("traced_wall_ns", Opt(Int(0, 2**63 - 1)), None),
    ],
)
def _t_quality(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import quality

    snap = quality.snapshot([CPU_A])
    quality.quality(**_kw({"before": snap, "after": snap, "placement": {}}, p, v))


@target(
    "quality",
    "quality.measure_cpus",
    [
        Param("pcpus", Seq(Cpu()), [CPU_A]),
        Param("pcpus[0]", Cpu(), CPU_A, names=("pcpus",)),
        Param("max_other_share", Float(0, 1), 0.02),
        Param("bogus_threshold", Never(), values=("0.5",)),
    ],
)
def _t_measure_cpus(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import quality

    kw = _set_entry({"pcpus": [CPU_A]}, p, v)
    with quality.measure_cpus(**kw) as m:
        pass
    assert m.quality is not None


@target(
    "tracing",
    "tracing.Trace",
    [
        Param("pcpus", Seq(Cpu(), 1), [CPU_A]),
        Param("pcpus[0]", Cpu(), CPU_A, names=("pcpus",)),
        Param("max_events", Int(1, 2**32), 1000),
        Param("buffer_bytes", Int(4096, 2**30), 65536),
        Param("kvm_pid", Opt(Pred(lambda v: v == os.getpid())), None),
        Param("kvm_events", Bool(), True),
    ],
)
def _t_trace(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import tracing

    t = tracing.Trace(**_set_entry({"pcpus": [CPU_A], "max_events": 1000, "buffer_bytes": 65536}, p, v))
    try:
        t.stop()
    finally:
        t.close()


# --- kvm: attach -------------------------------------------------------------------------------


#: the pid of the worker's attach target (a child holding one VM), once started
_CHILD: list[int] = []


@target(
    "kvm",
    "kvm.attach",
    [
        Param(
            "pid",
            Pred(
                lambda v: (
                    bool(_CHILD) and isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v == _CHILD[0]
                )
            ),
            lambda ctx: ctx.child_pid,
            names=("pid", "process"),
            extra=("pid:1", "pid:self", "pid:child", "np.int64"),
        )
    ],
)
def _t_attach(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import kvm

    a = kvm.attach(v)
    a.close()


_DUR = dict(skip_valid=lambda v: float(v) > 0.2)


@target(
    "kvm",
    "Attached.sample",
    [
        Param("duration_s", Float(0, 86400, lo_open=True), 0.02, **_DUR),
        Param("every_s", Float(0, 86400, lo_open=True), 0.01, **_DUR),
    ],
)
def _t_sample(ctx: Any, p: str, v: Any) -> None:
    ctx.attached.sample(**_kw({"duration_s": 0.02, "every_s": 0.01}, p, v))


@target(
    "kvm",
    "Attached.trace",
    [
        Param("duration_s", Float(1e-3, 3600), 0.02, **_DUR),
        Param("pcpus", Opt(Seq(Cpu(), 1)), None),
        Param("pcpus[0]", Cpu(), CPU_A, names=("pcpus",)),
        Param("max_events", Opt(Int(1, 2**32)), 1000),
    ],
)
def _t_attached_trace(ctx: Any, p: str, v: Any) -> None:
    ctx.attached.trace(**_set_entry({"duration_s": 0.02, "max_events": 1000}, p, v))


@target("kvm", "Attached.wait_exited", [Param("timeout_s", Float(0, 86400), 0.0, **_DUR)])
def _t_wait_exited(ctx: Any, p: str, v: Any) -> None:
    ctx.attached.wait_exited(v)


# --- kvm: Host / Vm / Vcpu -------------------------------------------------------------------

MEM_MIB = 4
MEM = MEM_MIB << 20
#: a scratch guest-physical address (RAM the guest environment leaves unused in a fresh VM)
SCRATCH = MEM - 4096


@target(
    "kvm",
    "kvm.Host",
    [
        Param(
            "path",
            Pred(lambda v: v == "/dev/kvm"),
            names=("path", "{value}"),
            extra=("'/nonexistent/kvm'",),
        )
    ],
)
def _t_host(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import kvm

    kvm.Host(v)


@target("kvm", "Host.check_extension", [Param("cap", Int(0, U32), 1)])
def _t_check_extension(ctx: Any, p: str, v: Any) -> None:
    ctx.host.check_extension(v)


@target("kvm", "Host.create_vm", [Param("memory_mib", Int(1, 3072), MEM_MIB), Param("irqchip", Bool(), True)])
def _t_create_vm(ctx: Any, p: str, v: Any) -> None:
    vm = ctx.host.create_vm(**_kw({"memory_mib": MEM_MIB}, p, v))
    vm.close()


def _empty_iterable(v: Any) -> bool:
    """An empty list, tuple or dict (an empty iterable of the items asked for)."""
    return isinstance(v, (list, tuple, dict)) and not v


def _vm_call(fn: Callable[[Any, str, Any], Any]) -> Callable[[Any, str, Any], Any]:
    def inner(ctx: Any, p: str, v: Any) -> Any:
        with ctx.host.create_vm(memory_mib=MEM_MIB) as vm:
            return fn(vm, p, v)

    return inner


def _gpa_param(hi: int, name: str = "gpa") -> Param:
    return Param(name, Int(0, hi), SCRATCH, names=(name, "guest-physical", "address"))


TARGETS_VM: list[tuple[str, list[Param], Callable[[Any, str, Any], Any]]] = [
    (
        "Vm.read",
        [_gpa_param(MEM - 1), Param("n", Int(0, 4096), 8)],
        lambda vm, p, v: vm.read(**_kw({"gpa": SCRATCH, "n": 8}, p, v)),
    ),
    (
        "Vm.write",
        [_gpa_param(MEM - 1), Param("data", Pred(lambda v: isinstance(v, bytes)), b"x")],
        lambda vm, p, v: vm.write(**_kw({"gpa": SCRATCH, "data": b"x"}, p, v)),
    ),
    ("Vm.read_u64", [_gpa_param(MEM - 8)], lambda vm, p, v: vm.read_u64(v)),
    (
        "Vm.write_u64",
        [_gpa_param(MEM - 8), Param("value", Int(0, U64), 1)],
        lambda vm, p, v: vm.write_u64(**_kw({"gpa": SCRATCH, "value": 1}, p, v)),
    ),
    (
        "Vm.write_u8",
        [_gpa_param(MEM - 1), Param("value", Int(0, 255), 1)],
        lambda vm, p, v: vm.write_u8(**_kw({"gpa": SCRATCH, "value": 1}, p, v)),
    ),
    (
        "Vm.load",
        [
            Param("program", Enum("halt", "triple_fault", "endless_loop"), "halt"),
            Param("iterations", Int(0, U64), 10),
        ],
        lambda vm, p, v: vm.load(v) if p == "program" else vm.load("pause_loop", iterations=v),
    ),
    ("Vm.results", [Param("program", Never())], lambda vm, p, v: vm.results(v)),
    ("Vm.create_vcpu", [Param("id", Int(0, 4095), 0, extra=("99",))], lambda vm, p, v: vm.create_vcpu(v)),
    ("Vm.halt_poll_ns", [Param("halt_poll_ns", Int(0, U32), 1000)], lambda vm, p, v: setattr(vm, "halt_poll_ns", v)),
    (
        "Vm.disable_exits",
        [
            *(Param(n, Bool(), False) for n in ("pause", "hlt", "cstate")),
            Param("mwait", Pred(lambda v: v is False), False),
        ],
        lambda vm, p, v: vm.disable_exits(**_kw({"pause": True}, p, v) if p != "pause" else {"hlt": True, p: v}),
    ),
    (
        "Vm.send_msi",
        [Param("dest_apic_id", Int(0, U32), 0), Param("vector", Int(32, 255), 0x40)],
        lambda vm, p, v: (vm.create_vcpu(0), vm.send_msi(**_kw({"dest_apic_id": 0, "vector": 0x40}, p, v))),
    ),
    (
        "Vm.msi_train",
        [
            Param("dest_apic_id", Int(0, U32), 0),
            Param("vector", Int(32, 255), 0x40),
            Param("count", Int(0, 16), 2),
            Param("gap_us", Float(0, 1000), 10.0),
        ],
        lambda vm, p, v: (
            vm.create_vcpu(0),
            vm.msi_train(**_kw({"dest_apic_id": 0, "vector": 0x40, "count": 2, "gap_us": 10.0}, p, v)),
        ),
    ),
    ("Vm.steal_times", [Param("vcpus", Opt(Pred(_empty_iterable)), None)], lambda vm, p, v: vm.steal_times(v)),
]


def _msi_ping(vm: Any, p: str, v: Any) -> Any:
    prog = vm.load("wait_interrupts", vector=0x40, count=1)
    vcpu = vm.create_vcpu(0)
    vcpu.start(prog)
    kw = _kw({"vcpu": vcpu, "program": prog, "vector": 0x40, "count": 1, "gap_us": 10.0, "timeout_s": 0.05}, p, v)
    return vm.msi_ping(**kw)


TARGETS_VM.append(
    (
        "Vm.msi_ping",
        [
            Param("vcpu", Never()),
            Param("program", Never()),
            Param("vector", Int(0, 255), 0x40),
            Param("count", Int(1, 10_000_000), 1),
            Param("gap_us", Float(0, 50_000), 10.0),
            Param("timeout_s", Float(0, 86400, lo_open=True), 0.05),
            Param("halts_before", Int(0, U64), 0),
        ],
        _msi_ping,
    )
)

for _name, _params, _fn in TARGETS_VM:
    TARGETS.append(
        Target("kvm", _name, _params, _vm_call(_fn), valid_ok=_name != "Vm.msi_ping", ran_exc=(TimeoutError,))
    )


def _vcpu_call(fn: Callable[[Any, str, Any], Any]) -> Callable[[Any, str, Any], Any]:
    def inner(ctx: Any, p: str, v: Any) -> Any:
        with ctx.host.create_vm(memory_mib=MEM_MIB) as vm:
            return fn(vm.create_vcpu(0), p, v)

    return inner


_TSC = 0x10  # IA32_TIME_STAMP_COUNTER: every vCPU has it


def _known_msr(v: Any) -> bool:
    """MSRs KVM reads and writes on any vCPU: TSC and IA32_P5_MC_ADDR (0)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and int(v) in (0, _TSC)


TARGETS_VCPU: list[tuple[str, list[Param], Callable[[Any, str, Any], Any]]] = [
    (
        "Vcpu.set_regs",
        [Param("rax", Int(0, U64), 1), Param("bogus_register", Never(), values=("0",), names=("bogus_register",))],
        lambda c, p, v: c.set_regs(**{p: v}),
    ),
    (
        "Vcpu.regs",
        [Param("regs", Pred(lambda v: v == {}), {}, names=("regs", "register"))],
        lambda c, p, v: setattr(c, "regs", v),
    ),
    ("Vcpu.set_sregs", [Param("cr8", Int(0, 15), 0)], lambda c, p, v: c.set_sregs(cr8=v)),
    (
        "Vcpu.get_msrs",
        [Param("indices", Pred(_empty_iterable), [], names=("MSR", "indices"))],
        lambda c, p, v: c.get_msrs(v),
    ),
    ("Vcpu.get_msr", [Param("index", Pred(_known_msr), _TSC, names=("MSR", "index"))], lambda c, p, v: c.get_msr(v)),
    (
        "Vcpu.set_msr",
        [
            Param("index", Pred(lambda v: _known_msr(v) and int(v) == _TSC), _TSC, names=("MSR", "index")),
            Param("value", Int(0, U64), 0, names=("MSR", "value")),
        ],
        lambda c, p, v: c.set_msr(**_kw({"index": _TSC, "value": 0}, p, v)),
    ),
    (
        "Vcpu.set_msrs",
        [Param("values", Pred(lambda v: isinstance(v, dict) and not v), {}, names=("MSR", "values"))],
        lambda c, p, v: c.set_msrs(v),
    ),
    ("Vcpu.io_in_value", [Param("io_in_value", Int(0, U64), 0)], lambda c, p, v: setattr(c, "io_in_value", v)),
    (
        "Vcpu.mmio_read_value",
        [Param("mmio_read_value", Int(0, U64), 0)],
        lambda c, p, v: setattr(c, "mmio_read_value", v),
    ),
    (
        "Vcpu.start",
        [Param("program", Int(0, MEM - 1), SCRATCH, names=("program", "entry", "guest-physical", "address", "gpa"))],
        lambda c, p, v: c.start(v),
    ),
    ("Vcpu.run", [Param("timeout_s", Float(0, 86400, lo_open=True), 0.01, **_DUR)], lambda c, p, v: c.run(v)),
    (
        "Vcpu.run_until",
        [
            Param("kind", Enum("io", "mmio", "hlt", "ucall", "shutdown"), "io"),
            Param("count", Int(1, U64), 1),
            Param("port", Opt(Int(0, 0xFFFF)), None),
            Param("timeout_s", Float(0, 86400, lo_open=True), 0.01, **_DUR),
        ],
        lambda c, p, v: c.run_until(**_kw({"kind": "io", "timeout_s": 0.01}, p, v)),
    ),
    (
        "Vcpu.run_program",
        [Param("timeout_s", Float(0, 86400, lo_open=True), 0.01, **_DUR)],
        lambda c, p, v: c.run_program(v),
    ),
    (
        "Vcpu.enable_steal_time",
        [
            Param(
                "gpa",
                Opt(
                    Pred(
                        lambda v: (
                            isinstance(v, (int, np.integer))
                            and not isinstance(v, bool)
                            and 0 <= v <= MEM - 64
                            and v % 64 == 0
                        )
                    )
                ),
                None,
                names=("gpa", "guest-physical", "address"),
            )
        ],
        lambda c, p, v: c.enable_steal_time(v),
    ),
]
for _name, _params, _fn in TARGETS_VCPU:
    TARGETS.append(Target("kvm", _name, _params, _vcpu_call(_fn), ran_exc=(TimeoutError,)))


# --- validation ------------------------------------------------------------------------------

_CASE = "haltpoll2015_always_vs_off_idle250hz"
_SEEDS = Pred(lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 1 <= v <= 1000)


def _executor_ok(v: Any) -> bool:
    import concurrent.futures as cf

    return v is None or isinstance(v, cf.Executor)


_VAL_COMMON = [
    Param("cases", Pred(lambda v: False), [_CASE], values=tuple(n for n in GENERIC if n != "None")),
    Param("cases[0]", Pred(lambda v: v == _CASE), _CASE, names=("case",)),
    Param("seeds", _SEEDS, 1, names=("seed",)),
    Param("duration_scale", Float(0, 100, lo_open=True), 0.02, skip_valid=lambda v: float(v) > 0.05),
    Param("executor", Pred(_executor_ok), None),
]


@target(
    "validation",
    "validation.validate",
    [
        *_VAL_COMMON,
        Param("costs", Opt(Enum("era", "measured", "this_host")), None, names=("costs", "cost")),
        Param("batch_size", Int(1, 2**20), 4),
        Param("progress", Opt(Pred(lambda v: isinstance(v, bool))), None),
    ],
)
def _t_validate(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import validation

    validation.validate(**_set_entry({"cases": [_CASE], "seeds": 1, "duration_scale": 0.02}, p, v))


@target(
    "validation",
    "validation.sensitivity",
    [
        *_VAL_COMMON,
        Param("params", Opt(Seq(Enum("run.length"), 1)), ["run.length"], names=("params", "assumption")),
        Param("factors", Seq(Float(0, None, lo_open=True), 1), (0.5,)),
        Param(
            "factors[0]",
            Pred(lambda v: Spec("float", 0, None, True).valid(v, CPUS) and float(v) != 1.0),
            0.5,
            names=("factors",),
        ),
    ],
)
def _t_sensitivity(ctx: Any, p: str, v: Any) -> None:
    from vcpulab.validation.sensitivity import sensitivity

    base = {"cases": [_CASE], "params": ["run.length"], "factors": (0.5,), "seeds": 1, "duration_scale": 0.02}
    sensitivity(**_set_entry(base, p, v))


# --- sim: run / sweep ------------------------------------------------------------------------


def _tiny() -> Any:
    from vcpulab import sim

    return sim.Config(host=sim.Host(n_pcpus=1), vms=(sim.Vm(vcpus=1),), duration_ns=1_000_000)


@target(
    "sim",
    "sim.run",
    [
        Param("config", Never()),
        Param("trace", Opt(Bool()), None),
        Param("trace_max_rows", Opt(Int(1, 2**63 - 1)), 1000),
    ],
)
def _t_sim_run(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import sim

    sim.run(**_kw({"config": _tiny()}, p, v))


def _points_ok(v: Any) -> bool:
    from vcpulab import sim

    return isinstance(v, sim.Config) or (isinstance(v, list) and not v)


@target(
    "sim",
    "sim.sweep",
    [
        Param("points", Pred(_points_ok), names=("point", "Config")),
        Param("grid", Opt(Pred(lambda v: isinstance(v, dict) and not v)), None),
        Param("grid[seed]", Never(), [0], names=("seed", "grid")),  # an empty axis is refused too (no points)
        Param("grid[seed][0]", Int(0, U64), 0, names=("seed",)),
        Param("threads", Opt(Int(1, 1024)), 1),
        Param("trace_max_rows", Opt(Int(1, 2**63 - 1)), 1000),
        Param("max_points", Opt(Int(1)), 10),  # a bound: any size is one
        Param("executor", Pred(_executor_ok), None),
        Param("progress", Bool(), False),
        Param("results", Bool(), False),
    ],
)
def _t_sweep(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import sim

    kw: dict[str, Any] = {"points": _tiny(), "grid": None, "progress": False}
    if p == "grid[seed]":
        kw["grid"] = {"seed": v}
    elif p == "grid[seed][0]":
        kw["grid"] = {"seed": [v]}
    else:
        kw[p] = v
    if p == "points" and isinstance(v, (list, tuple)) and v:
        kw["points"] = list(v)
    sim.sweep(kw.pop("points"), kw.pop("grid"), **kw)


@target(
    "sim",
    "Config.with_path",
    [
        Param(
            "path",
            Pred(lambda v: v == "seed"),
            "seed",
            names=("path",),
            extra=("'host.bogus'", "'vms.-1.vcpus'", "'vms.9.vcpus'", "'vms.x'", "'.'"),
        ),
        Param("value", Int(0, U64), 0, names=("seed",)),
    ],
)
def _t_with_path(ctx: Any, p: str, v: Any) -> None:
    cfg = _tiny()
    if p == "path":
        cfg.with_path(v, 1)
    else:
        cfg.with_path("seed", v)


@target("sim", "Config.replace", [Param("seed", Int(0, U64), 0), Param("bogus_field", Never(), values=("0",))])
def _t_replace(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import _core

    _core.sim_validate(_tiny().replace(**{p: v}).to_json())


# --- sim: every config field -----------------------------------------------------------------

#: (class, field) -> a spec that the schema alone does not give (rules across fields, tuples)
_FIELD_OVERRIDES: dict[tuple[str, str], Spec] = {
    ("Host", "sockets"): Int(1, 4),  # <= n_pcpus (4) and dividing it
    ("Host", "threads_per_core"): Pred(
        lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v in (1, 2, 4)
    ),
    ("Host", "idle_states"): Pred(
        lambda v: (
            isinstance(v, (list, tuple))
            and all(
                isinstance(st, (list, tuple))
                and len(st) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 10**9 for x in st)
                for st in v
            )
            and all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(v, v[1:]))
        )
    ),
    ("Host", "vcpu_pcpus"): Pred(lambda v: isinstance(v, (list, tuple)) and not v),
    # True needs yield_scope="vm_group" under the fair scheduler (the embedding Host has "run_queue")
    ("Host", "vm_groups"): Pred(lambda v: isinstance(v, (bool, np.bool_)) and not v),
    # indices of the embedding VM's vCPUs (it has one), ascending
    ("Pv", "guest_idle_poll_vcpus"): Pred(
        lambda v: (
            isinstance(v, (list, tuple))
            and all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) and x == 0 for x in v)
            and len(v) <= 1
        )
    ),
    ("Workload", "phases"): Never(),
    ("Workload", "thread0_phases"): Pred(lambda v: isinstance(v, (list, tuple)) and not v),
    ("Config", "vms"): Never(),
    ("Config", "warmup_ns"): Int(0, 100_000_000 - 1),
    ("Cfs", "min_granularity_ns"): Int(1000, 6_000_000),  # <= latency_ns
    ("Cfs", "latency_ns"): Int(750_000, 10**9),  # >= min_granularity_ns
    ("TaskQueue", "prob"): Pred(lambda v: Spec("float").valid(v, CPUS) and v == 1.0),
    ("HostNoise", "kthread_hz"): Float(0, 0.5e9 / 20_000),
    ("HostNoise", "vmm_io_hz"): Float(0, 0.5e9 / 20_000),
    ("Policy", "fn"): Opt(Pred(callable)),
}


def _field_spec(cls_name: str, f: Any) -> Spec:
    from vcpulab.sim import _config as C

    if (cls_name, f.name) in _FIELD_OVERRIDES:
        return _FIELD_OVERRIDES[(cls_name, f.name)]
    try:
        fs = C.field_schema(cls_name, f.name)
    except KeyError:
        return Never()
    nullable = False
    typ = fs.get("type")
    if isinstance(typ, list):
        nullable = "null" in typ
        typ = next((t for t in typ if t != "null"), None)
    if "anyOf" in fs:
        alts = [a for a in fs["anyOf"] if a.get("type") != "null"]
        nullable = len(alts) != len(fs["anyOf"])
        typ = alts[0].get("type") if len(alts) == 1 else None
    spec: Spec
    if "enum" in fs:
        spec = Enum(*fs["enum"])
    elif typ == "boolean":
        spec = Bool()
    elif typ in ("integer", "number"):
        lo, hi, hi_open = C._limits(cls_name, f.name)
        lo2 = None if lo == -math.inf else lo
        hi2 = None if hi == math.inf else hi
        spec = Int(lo2, hi2) if typ == "integer" else Float(lo2, hi2, hi_open=hi_open)
        if hi_open and typ == "integer":
            spec = Spec("int", lo2, hi2, hi_open=True)
    elif typ == "string":
        spec = Pred(lambda v: isinstance(v, str))
    else:
        spec = Never()
    return Opt(spec) if nullable else spec


def _config_classes() -> list[str]:
    return [
        "Config", "Host", "Background", "HostNoise", "Cfs", "Vm", "Ple", "Policy", "Pv", "HaltPoll", "Guest",
        "Workload", "Compute", "Lock", "Ipi", "Barrier", "Sleep", "Send", "Recv", "TaskQueue",
    ]  # fmt: skip


def _config_targets() -> None:
    import dataclasses

    from vcpulab import sim

    for cls_name in _config_classes():
        cls = getattr(sim, cls_name)
        params = []
        for f in dataclasses.fields(cls):
            if f.name in ("fn",):
                continue
            spec = _field_spec(cls_name, f)
            good = None if f.default is dataclasses.MISSING else f.default
            params.append(Param(f.name, spec, good, names=(f"{cls_name}.{f.name}", f.name)))
        TARGETS.append(Target("sim config", f"sim.{cls_name}", params, _config_call(cls_name)))


def _embed(cls_name: str, obj: Any) -> Any:
    """A whole (tiny) Config holding ``obj``."""
    from vcpulab import sim

    vm_fields = {
        "Ple": "ple",
        "Policy": "policy",
        "Pv": "pv",
        "HaltPoll": "halt_poll",
        "Guest": "guest",
        "Workload": "workload",
    }
    base = _tiny()
    if cls_name == "Config":
        return obj
    if cls_name == "Host":
        return base.replace(host=obj)
    if cls_name in ("Background", "HostNoise", "Cfs"):
        fname = {"Background": "background", "HostNoise": "noise", "Cfs": "cfs"}[cls_name]
        return base.replace(host=sim.Host(n_pcpus=1, **{fname: obj}))
    if cls_name == "Vm":
        return base.replace(vms=(obj,))
    if cls_name in vm_fields:
        return base.replace(vms=(sim.Vm(vcpus=1, **{vm_fields[cls_name]: obj}),))
    phases: tuple[Any, ...] = (obj, sim.Compute(10_000))
    if cls_name == "Recv":
        phases += (sim.Send(),)
    return base.replace(vms=(sim.Vm(vcpus=2, threads=2, workload=sim.Workload(phases=phases)),))


def _config_call(cls_name: str) -> Callable[[Any, str, Any], Any]:
    def call(ctx: Any, p: str, v: Any) -> None:
        from vcpulab import _core, sim

        cls = getattr(sim, cls_name)
        kw: dict[str, Any] = {p: v}
        if cls_name == "Compute" and p != "ns":
            kw["ns"] = 1000
        if cls_name == "TaskQueue" and p != "tasks":
            kw["tasks"] = 4
        obj = cls(**kw)
        _core.sim_validate(_embed(cls_name, obj).to_json())

    return call


# --- experiment ------------------------------------------------------------------------------

_RUN_PARAMS = [
    Param("workload", Never()),
    Param("vcpus", Int(1, 256), 1),
    Param("pcpus", Opt(Seq(Cpu(), 1)), None),
    Param("pcpus[0]", Cpu(), CPU_A, names=("pcpus",)),
    Param("placement", Opt(Pred(lambda v: False)), None),
    Param("placement[0]", Seq(Cpu(), 1), [CPU_A], names=("placement",)),
    Param("placement[0][0]", Cpu(), CPU_A, names=("placement",)),
    Param("duration_s", Float(0, 86397, lo_open=True), 0.02, **_DUR),
    Param("sample_every_s", Opt(Float(1e-5, 86400)), 0.01),
    Param("vms", Int(1, 64), 1),
    Param("memory_mib", Int(2, 3072), 16),
    Param("halt_poll_ns", Opt(Int(0, U32)), None),
    Param("steal_time", Bool(), True),
    Param("host", Opt(Never())),
    Param("poll_every_s", Float(0, 1, lo_open=True), 0.05),
    Param("warn_quality", Bool(), False),
    Param("quality_thresholds", Opt(Pred(lambda v: isinstance(v, dict) and not v)), None),
    Param("repeat", Opt(Int(1, 3)), 2),
    Param("trace", Bool(), False),
    Param("trace_max_events", Int(1, 2**32), 1000),
    Param("trace_kvm_events", Bool(), True),
]


@target("experiment", "experiment.run", _RUN_PARAMS)
def _t_run(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import experiment

    base: dict[str, Any] = {"workload": experiment.Spin(), "vcpus": 1, "duration_s": 0.02, "warn_quality": False}
    if p == "placement[0]":
        base["placement"] = [v]
    elif p == "placement[0][0]":
        base["placement"] = [[v]]
    else:
        base = _set_entry(base, p, v)
    experiment.run(**base)


def _workload_target(cls_name: str, params: list[Param], vcpus: int, **base: Any) -> None:
    def call(ctx: Any, p: str, v: Any) -> None:
        from vcpulab import experiment

        w = getattr(experiment, cls_name)(**_kw(base, p, v))
        experiment.run(w, vcpus=vcpus, duration_s=0.02, warn_quality=False, placement=[[CPU_A]] * vcpus)

    for prm in params:
        if not prm.names:
            prm.names = (f"{cls_name}.{prm.name}", prm.name)
    TARGETS.append(Target("experiment", f"experiment.{cls_name}", params, call))


_LOOPS = Int(0, U64)
_workload_target(
    "SpinLock",
    [
        Param("kind", Enum("tas", "ticket"), "tas"),
        Param("hold", _LOOPS, 50),
        Param("think", _LOOPS, 50),
        Param("iterations", _LOOPS, 10),
    ],
    2,
)
_workload_target(
    "PvSpinLock",
    [
        Param("kind", Enum("tas"), "tas"),
        Param("hold", _LOOPS, 50),
        Param("think", _LOOPS, 50),
        Param("iterations", _LOOPS, 10),
        Param("check_every", Int(1, U64), 64),
        Param("kick_vector", Int(32, 255), 0xF0),
        Param("preempted_from_host", Pred(lambda v: isinstance(v, (list, tuple)) and not v), ()),
    ],
    2,
)
_workload_target(
    "MsiPingPong",
    [Param("rounds", Int(2, 16384), 10), Param("gap_us", Float(0, 1000), 50.0), Param("vector", Int(32, 255), 0x40)],
    1,
    rounds=10,
)
_workload_target(
    "IpiPingPong",
    [
        Param("rounds", Int(1, 16384), 10),
        Param("gap_us", Float(0, 1000), 50.0),
        Param("vector_base", Int(32, 254), 0x60),
    ],
    2,
    rounds=10,
)
_workload_target("IdleTicks", [Param("hz", Int(1, 100_000), 250), Param("vector", Int(32, 255), 0xEC)], 1)
_WORKER_IDS = Pred(lambda v: isinstance(v, (list, tuple)) and all(type(x) is int and 1 <= x < 3 for x in v))
_workload_target(
    "WakePlacement",
    [
        Param("rule", Enum("available_idle", "pcpu_is_idle"), "available_idle"),
        Param("work", _LOOPS, 50),
        Param("poll", _LOOPS, 0),
        Param("rounds", _LOOPS, 10),
        Param("vector", Int(32, 255), 0x70),
        Param("preempted_from_host", _WORKER_IDS, ()),
        Param("is_idle_from_host", _WORKER_IDS, ()),
    ],
    3,
)


# --- calibrate.halt_poll -----------------------------------------------------------------------


class _Reached(BaseException):
    """Raised where a call passed its checks and would start real work."""


def _cpu_other(v: Any) -> bool:
    return Spec("cpu").valid(v, CPUS) and int(v) != CPU_B


@target(
    "calibrate",
    "calibrate.halt_poll",
    [
        Param("gaps_us", Seq(Float(0, 1e6), 1), [20.0]),
        Param("gaps_us[0]", Float(0, 1e6), 20.0, names=("gaps_us",)),
        Param("max_poll_ns", Seq(Int(0, U32), 1), [0]),
        Param("max_poll_ns[0]", Int(0, U32), 0, names=("max_poll_ns",)),
        Param("rounds", Int(20, 100_000), 20),
        Param("min_cell_s", Float(0, 10), 0.1),
        Param("pcpu", Pred(_cpu_other), CPU_A, extra=tuple(CPU_EXTRA)),
        Param(
            "sender_cpu", Pred(lambda v: Spec("cpu").valid(v, CPUS) and int(v) != CPU_A), CPU_B, extra=tuple(CPU_EXTRA)
        ),
        Param("seed", Int(0, U64 - 8), 0),
        Param("background_busy_ns", Int(1, 10**13), 10_000_000),
        Param("sim_replicas", Int(1, 1000), 8),
        Param("deadline_s", Float(0, 86400, lo_open=True), 60.0),
        Param("plot", Opt(Pred(lambda v: isinstance(v, str) and v != "")), None),
        Param("host", Opt(Never())),
        Param("retries", Int(0, 10), 2),
        Param("warn_quality", Bool(), True),
    ],
)
def _t_halt_poll(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import calibrate
    from vcpulab.sim import halt_poll as hp

    base = {"gaps_us": [20.0], "max_poll_ns": [0], "rounds": 20, "pcpu": CPU_A, "sender_cpu": CPU_B}
    saved = hp.host_params

    def stop() -> Any:
        raise _Reached

    hp.host_params = stop  # type: ignore[assignment]
    try:
        calibrate.halt_poll(**_set_entry(base, p, v))
    finally:
        hp.host_params = saved  # type: ignore[assignment]


# --- plot / analysis -----------------------------------------------------------------------------


@target(
    "plot",
    "plot.sched_map",
    [
        Param("obj", Never(), names=("trace", "Result", "obj")),
        Param("us_per_pixel", Float(0, 1e6, lo_open=True), 10.0),
        Param("row_px", Opt(Int(1, 64)), 4),
        Param("start_ns", Opt(Int(0, 999_999)), 0),
        Param("end_ns", Opt(Int(1, 2**40)), None),
        Param("n_pcpus", Opt(Int(2, 4096)), None),
        Param("legend", Opt(Bool()), None),
        Param("title", Opt(Pred(lambda v: isinstance(v, str))), None),
        Param("compact", Bool(), False),
    ],
)
def _t_sched_map(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import plot

    plot.sched_map(**_kw({"obj": ctx.simres}, p, v))
    ctx.close_figures()


@target(
    "plot",
    "plot.sched_map_codes",
    [
        Param("us_per_pixel", Float(0, 1e6, lo_open=True), 10.0),
        Param("start_ns", Opt(Int(0, 999_999)), 0),
        Param("end_ns", Opt(Int(1, 2**40)), None),
        Param("n_pcpus", Opt(Int(2, 4096)), None),
    ],
)
def _t_sched_map_codes(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import plot

    plot.sched_map_codes(ctx.simres, **{p: v})


@target(
    "plot",
    "plot.time_breakdown",
    [Param("by", Enum("vcpu", "vm"), "vcpu"), Param("categories", Opt(Seq(Pred(lambda v: False), 1)), None)],
)
def _t_plot_tb(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import plot

    plot.time_breakdown(ctx.simres, **{p: v})
    ctx.close_figures()


@target(
    "plot",
    "plot.stats_over_time",
    [Param("stats", Seq(Pred(lambda v: v == "exits"), 1), ["exits"]), Param("per_second", Bool(), True)],
)
def _t_stats_over_time(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import plot

    plot.stats_over_time(**_kw({"run": ctx.run, "stats": ["exits"]}, p, v))
    ctx.close_figures()


@target("plot", "plot.exit_handling", [Param("top", Int(1, 1000), 6)])
def _t_exit_handling(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import plot

    plot.exit_handling(ctx.run, top=v)
    ctx.close_figures()


def _metric_df() -> Any:
    import polars as pl

    return pl.DataFrame({"policy": ["a"] * 3 + ["b"] * 3, "seed": [0, 1, 2] * 2, "m": [1.0, 2.0, 3.0, 2.0, 3.0, 4.0]})


@target(
    "plot",
    "plot.policy_comparison",
    [
        Param("metric", Pred(lambda v: v == "m"), "m"),
        Param("by", Pred(lambda v: v == "policy"), "policy"),
        Param("confidence", Float(0, 1, lo_open=True, hi_open=True), 0.95),
    ],
)
def _t_policy_comparison(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import plot

    plot.policy_comparison(**_kw({"df": _metric_df(), "metric": "m"}, p, v))
    ctx.close_figures()


@target(
    "analysis",
    "analysis.compare",
    [
        Param("a", Seq(Float(), 1), [1.0, 2.0, 3.0]),
        Param("b", Seq(Float(), 1), [2.0, 3.0, 4.0]),
        Param("paired", Bool(), False),
        Param("interval", Enum("t", "bca", "percentile"), "t"),
        Param("alpha", Float(0, 1, lo_open=True, hi_open=True), 0.05),
        Param("n_resamples", Int(100, 10**7), 1000),
        Param("confidence", Float(0, 1, lo_open=True, hi_open=True), 0.95),
        Param("alternative", Enum("two-sided", "greater", "less"), "two-sided"),
        Param("seed", Int(0), 0),  # numpy takes any non-negative int
    ],
)
def _t_compare_ab(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import analysis

    analysis.compare(**_kw({"a": [1.0, 2.0, 3.0], "b": [2.0, 3.0, 4.0], "n_resamples": 1000}, p, v))


@target(
    "analysis",
    "analysis.mean_interval",
    [Param("values", Seq(Float()), [1.0, 2.0]), Param("confidence", Float(0, 1, lo_open=True, hi_open=True), 0.95)],
)
def _t_mean_interval(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import analysis

    analysis.mean_interval(**_kw({"values": [1.0, 2.0, 3.0]}, p, v))


@target(
    "analysis",
    "analysis.gang_share",
    [Param("step_ns", Int(1, 10**12), 20_000), Param("skip_frac", Float(0, 1, hi_open=True), 0.5)],
)
def _t_gang_share(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import analysis

    analysis.gang_share(ctx.simres, **{p: v})


@target("analysis", "analysis.time_breakdown", [Param("by", Enum("vcpu", "vm"), "vcpu")])
def _t_an_tb(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import analysis

    analysis.time_breakdown(ctx.simres, by=v)


@target(
    "analysis",
    "analysis.stat_deltas",
    [Param("stats", Opt(Seq(Pred(lambda v: v == "exits"), 1)), None)],
)
def _t_stat_deltas(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import analysis

    analysis.stat_deltas(ctx.run, stats=v)


@target("analysis", "analysis.exits_by_reason", [Param("by_vcpu", Bool(), False)])
def _t_exits_by_reason(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import analysis

    analysis.exits_by_reason(ctx.run, by_vcpu=v)


# --- export / traveling calibrations ----------------------------------------------------------


@target(
    "export",
    "export.to_perfetto",
    [
        Param("obj", Never(), names=("trace", "Run", "Result")),
        Param("path", Pred(lambda v: isinstance(v, str) and bool(v)), "x.json", names=("path", "folder")),
        Param("start_ns", Opt(Int(0, 2_000_000 - 1)), None),
        Param("end_ns", Opt(Int(1, 2**63 - 1)), None, names=("end_ns", "window")),
        Param("exits", Bool(), True),
        Param("halts", Bool(), True),
    ],
)
def _t_to_perfetto(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import sim
    from vcpulab.export import to_perfetto

    base: dict[str, Any] = {"obj": sim.run(_tiny(), trace=True), "path": "x.json"}
    kw = _kw(base, p, v)
    if isinstance(kw["path"], str) and kw["path"]:
        kw["path"] = os.path.join(ctx.tmp, kw["path"])
    to_perfetto(**kw)


@target(
    "twins",
    "twins.Calibration.load",
    [Param("path", Pred(lambda v: v == "good"), "good", names=("calibration", "file", "path"))],
)
def _t_calibration_load(ctx: Any, p: str, v: Any) -> None:
    from vcpulab import twins

    path = twins.REFERENCE_CALIBRATION if v == "good" else v
    if isinstance(v, str) and v != "good":
        path = os.path.join(ctx.tmp, "cal.json")
        with open(path, "w") as f:
            f.write(v)
    twins.Calibration.load(path)


# --- CLI -----------------------------------------------------------------------------------------

_BAD_NUMBERS = ("x", "0", "-1", "nan", "inf", "1e308", "", "18446744073709551616", "0.5")


def _pos_int(hi: float = math.inf) -> Callable[[str], bool]:
    return lambda s: s.isdigit() and 1 <= int(s) <= hi


def _pos_float(hi: float) -> Callable[[str], bool]:
    def ok(s: str) -> bool:
        try:
            f = float(s)
        except ValueError:
            return False
        return math.isfinite(f) and 0 < f <= hi

    return ok


#: (flag, argv before the value, the values, which are valid): argv's SPEC is a good SPEC.toml, CHILD the attach target
_CLI_FLAGS: list[tuple[str, list[str], tuple[str, ...], Callable[[str], bool]]] = [
    ("sim --threads", ["sim", "SPEC", "--threads"], _BAD_NUMBERS, _pos_int(1024)),
    ("sim --max-points", ["sim", "SPEC", "--max-points"], _BAD_NUMBERS, _pos_int()),
    ("kvm steal --vcpus", ["kvm", "steal", "--duration-s", "0.02", "--vcpus"], _BAD_NUMBERS, _pos_int(256)),
    ("kvm steal --duration-s", ["kvm", "steal", "--duration-s"], _BAD_NUMBERS, _pos_float(86397)),
    (
        "kvm steal --pcpus",
        ["kvm", "steal", "--duration-s", "0.02", "--pcpus"],
        ("x", "-1", "99", "1-0", "", "0-1048576", "0,,1"),
        lambda s: s.isdigit() and int(s) in CPUS,
    ),
    ("watch PID", ["watch"], _BAD_NUMBERS, lambda s: False),
    ("watch --interval-s", ["watch", "CHILD", "--count", "1", "--interval-s"], _BAD_NUMBERS, _pos_float(86400)),
    ("watch --count", ["watch", "CHILD", "--interval-s", "0.05", "--count"], _BAD_NUMBERS, _pos_int()),
    ("trace PID", ["trace"], _BAD_NUMBERS, lambda s: False),
    ("trace --duration-s", ["trace", "CHILD", "--duration-s"], _BAD_NUMBERS, _pos_float(3600)),
    ("info --device", ["info", "--device"], ("/nonexistent", "", "/dev/null"), lambda s: False),
    ("subcommand", [], ("bogus", "--bogus", "sim"), lambda s: False),
]

_GOOD_SPEC = "[config]\nduration_ns = 1_000_000\n[config.host]\nn_pcpus = 1\n[[config.vms]]\nvcpus = 1\n"

#: a bad SPEC.toml -> what its message must name
_SPECS: dict[str, tuple[str, tuple[str, ...]]] = {
    "not toml": ("[config\nx = ", ("TOML",)),
    "binary": ("\x00\xff\xfe", ("TOML", "UTF-8", "text")),
    "unknown section": ("[bogus]\nx = 1\n", ("bogus",)),
    "config not a table": ("config = 1\n", ("config",)),
    "unknown field": ("[config]\nbogus = 1\n", ("bogus",)),
    "duration_ns -1": ("[config]\nduration_ns = -1\n", ("duration_ns",)),
    "duration_ns float": ("[config]\nduration_ns = 0.5\n", ("duration_ns",)),
    "duration_ns nan": ("[config]\nduration_ns = nan\n", ("duration_ns",)),
    "duration_ns inf": ("[config]\nduration_ns = inf\n", ("duration_ns",)),
    "duration_ns string": ('[config]\nduration_ns = "x"\n', ("duration_ns",)),
    "duration_ns huge": ("[config]\nduration_ns = 9223372036854775807\n", ("duration_ns",)),
    "seed negative": ("[config]\nseed = -1\n", ("seed",)),
    "trace int": ("[config]\ntrace = 1\n", ("trace",)),
    "host.n_pcpus 0": ("[config.host]\nn_pcpus = 0\n", ("n_pcpus",)),
    "host.n_pcpus huge": ("[config.host]\nn_pcpus = 1_000_000_000\n", ("n_pcpus",)),
    "host.scheduler bogus": ('[config.host]\nscheduler = "bogus"\n', ("scheduler",)),
    "host not a table": ("[config]\nhost = 3\n", ("host",)),
    "vms not an array": ("[config]\nvms = 3\n", ("vms",)),
    "vms entry not a table": ("[config]\nvms = [1]\n", ("vms",)),
    "vm vcpus 0": ("[[config.vms]]\nvcpus = 0\n", ("vcpus",)),
    "vm workload bogus": ('[[config.vms]]\nworkload = "bogus"\n', ("workload",)),
    "vm policy bogus": ('[[config.vms]]\npolicy = "bogus"\n', ("policy",)),
    "vm policy int": ("[[config.vms]]\npolicy = 3\n", ("policy",)),
    "vm ple.window -1": ("[[config.vms]]\n[config.vms.ple]\nwindow = -1\n", ("window",)),
    "grid not a table": (_GOOD_SPEC + "grid = 3\n", ("grid",)),
    "grid axis empty": (_GOOD_SPEC + "[grid]\nseed = []\n", ("seed", "grid")),
    "grid axis scalar": (_GOOD_SPEC + "[grid]\nseed = 3\n", ("seed", "grid")),
    "grid bad path": (_GOOD_SPEC + '[grid]\n"host.bogus" = [1]\n', ("bogus",)),
    "grid bad value": (_GOOD_SPEC + '[grid]\n"host.n_pcpus" = [0]\n', ("n_pcpus",)),
    "grid huge": (_GOOD_SPEC + '[grid]\nseed = [0, 1]\n"host.tick_ns" = [1, 2]\n', ()),
    "output unknown key": (_GOOD_SPEC + "[output]\nbogus = 1\n", ("bogus",)),
    "output us_per_pixel nan": (_GOOD_SPEC + "[output]\nus_per_pixel = nan\n", ("us_per_pixel",)),
    "output us_per_pixel string": (_GOOD_SPEC + '[output]\nus_per_pixel = "x"\n', ("us_per_pixel",)),
    "output sched_map int": (_GOOD_SPEC + "[output]\nsched_map = 3\n", ("sched_map",)),
    "output sched_map without trace": (_GOOD_SPEC + "[output]\nsched_map = true\n", ("sched_map", "trace")),
    "missing file": ("", ("no such file",)),
}
del _SPECS["grid huge"]


def child_env() -> dict[str, str]:
    """The environment of a child process: this vcpulab first on an absolute
    PYTHONPATH (a relative one would be read from the child's cwd), no
    backtraces, no tracebacks from the CLI, a non-interactive matplotlib."""
    import vcpulab

    root = os.path.dirname(os.path.dirname(os.path.abspath(vcpulab.__file__)))
    rest = [os.path.abspath(x) for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]
    env = {**os.environ, "RUST_BACKTRACE": "0", "MPLBACKEND": "Agg", "PYTHONPATH": os.pathsep.join([root, *rest])}
    env.pop("VCPULAB_TRACEBACK", None)
    return env


def _cli_run(ctx: Any, argv: list[str], names: tuple[str, ...]) -> None:
    """Runs the CLI; raises ValueError(its error line) when it refused cleanly,
    RuntimeError when it printed a traceback or failed without one line."""
    env = child_env()
    try:
        r = subprocess.run(
            [sys.executable, "-m", "vcpulab.cli", *argv],
            capture_output=True,
            text=True,
            timeout=ctx.timeout * 0.8,
            env=env,
            cwd=ctx.tmp,
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        raise _CliHang from None
    if r.returncode < 0:
        raise _CliCrash(f"killed by signal {-r.returncode}: {r.stderr[-300:]}")
    err = r.stderr.strip()
    if r.returncode == 0:
        return
    if "Traceback" in err or "PanicException" in err or "panicked" in err:
        raise RuntimeError(f"exit {r.returncode} with a traceback: {err.splitlines()[-1] if err else ''}")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if len(lines) != 1:
        raise RuntimeError(f"exit {r.returncode}, {len(lines)} lines on stderr: {err[:300]}")
    raise ValueError(lines[0])


class _CliHang(BaseException):
    pass


class _CliCrash(BaseException):
    pass


def _cli_flag_call(argv_pre: list[str]) -> Callable[[Any, str, Any], Any]:
    def call(ctx: Any, p: str, v: Any) -> None:
        spec = os.path.join(ctx.tmp, "good.toml")
        with open(spec, "w") as f:
            f.write(_GOOD_SPEC)
        pre = [spec if a == "SPEC" else str(ctx.child_pid) if a == "CHILD" else a for a in argv_pre]
        _cli_run(ctx, [*pre, v, *(["--out", os.path.join(ctx.tmp, "out")] if pre[:1] == ["sim"] else [])], ())

    return call


def _cli_spec_call(ctx: Any, p: str, v: Any) -> None:
    text, _ = _SPECS[v]
    path = os.path.join(ctx.tmp, "spec.toml")
    if v == "missing file":
        path = os.path.join(ctx.tmp, "missing.toml")
    else:
        with open(path, "w", encoding="latin-1" if v == "binary" else "utf-8") as f:
            f.write(text)
    _cli_run(ctx, ["sim", path, "--out", os.path.join(ctx.tmp, "out"), "--quiet"], ())


for _flag, _pre, _vals, _ok in _CLI_FLAGS:
    _last = _flag.split()[-1]
    _names: tuple[str, ...] = (_last, _last.lstrip("-").replace("-", "_"), "{value}")
    if _flag in ("watch PID", "trace PID"):
        _names = ("pid", "process", "argument")
    if _flag == "subcommand":
        _names = ("invalid choice", "unrecognized", "required", "{value}")
    TARGETS.append(
        Target(
            "cli",
            f"cli {_flag}",
            [Param("value", Pred(_ok), values=_vals, raw=True, names=_names)],
            _cli_flag_call(_pre),
            valid_ok=False,
        )
    )
TARGETS.append(
    Target(
        "cli",
        "cli sim SPEC.toml",
        [Param("spec", Never(), values=tuple(_SPECS), raw=True)],
        _cli_spec_call,
        valid_ok=False,
    )
)


def _spec_names(value: str) -> tuple[str, ...]:
    return _SPECS[value][1]


# --------------------------------------------------------------------------- cases

CLEAN_TYPES: tuple[type[BaseException], ...] = (TypeError, ValueError, LookupError, OSError)


@dataclass
class Case:
    idx: int
    target: str
    param: str
    value: str

    @property
    def key(self) -> str:
        return f"{self.target} | {self.param} = {self.value}"


def all_targets() -> list[Target]:
    if not any(t.group == "sim config" for t in TARGETS):
        _config_targets()
    return TARGETS


def enumerate_cases(quick: bool, seed: int, only: Sequence[str] | None) -> list[Case]:
    rng = random.Random(seed)
    out: list[Case] = []
    for t in all_targets():
        if only and not any(o in t.name or o == t.group for o in only):
            continue
        for p in t.params:
            vals = p.value_names()
            if quick and len(vals) > 5:
                vals = sorted(rng.sample(vals, 5), key=vals.index)
            for v in vals:
                out.append(Case(len(out), t.name, p.name, v))
    return out


# --------------------------------------------------------------------------- the worker


class _RealWork(BaseException):
    """A fenced call (twins.compare / grid) started calibration or a real trial."""


class Ctx:
    """What the worker's calls share: a Host, a calibration, a tiny traced sim
    Result and real Run, a child process holding a VM (for attach), a scratch dir."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.tmp = tempfile.mkdtemp(prefix="vcpulab-hostile-")
        self._cache: dict[str, Any] = {}
        self._fenced = False
        self._install_fences()

    def _lazy(self, name: str, make: Callable[[], Any]) -> Any:
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    def _install_fences(self) -> None:
        from vcpulab import experiment, twins
        from vcpulab.twins import _grid, _running, _twin

        real_run, real_cal = experiment.run, twins.calibrate

        def run(*a: Any, **k: Any) -> Any:
            if self._fenced:
                raise _RealWork("a real trial started (experiment.run)")
            return real_run(*a, **k)

        def calibrate(*a: Any, **k: Any) -> Any:
            if self._fenced:
                raise _RealWork("a calibration started (twins.calibrate)")
            return real_cal(*a, **k)

        experiment.run = run  # type: ignore[assignment]
        # the package's name, and where twin, compare and grid look calibrate up
        for mod in (twins, _twin, _running, _grid):
            mod.calibrate = calibrate  # type: ignore[attr-defined]
        self._real_calibrate = real_cal

    def fence(self) -> Any:
        ctx = self

        class _F:
            def __enter__(self) -> None:
                ctx._fenced = True

            def __exit__(self, *exc: Any) -> None:
                ctx._fenced = False

        return _F()

    @property
    def host(self) -> Any:
        from vcpulab import kvm

        return self._lazy("host", kvm.Host)

    @property
    def cal(self) -> Any:
        return self._lazy("cal", lambda: self._real_calibrate())

    @property
    def simres(self) -> Any:
        from vcpulab import sim

        cfg = sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=3),), duration_ns=1_000_000, trace=True)
        return self._lazy("simres", lambda: sim.run(cfg))

    @property
    def run(self) -> Any:
        from vcpulab import experiment

        return self._lazy(
            "run", lambda: experiment.run(experiment.Spin(), vcpus=1, duration_s=0.05, trace=True, warn_quality=False)
        )

    @property
    def child_pid(self) -> int:
        def start() -> subprocess.Popen[str]:
            code = "from vcpulab.kvm import Host\nimport time\nvm = Host().create_vm(memory_mib=4)\nv = vm.create_vcpu(0)\nprint('READY', flush=True)\ntime.sleep(3600)\n"
            p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=child_env())
            assert p.stdout is not None and p.stdout.readline().strip() == "READY"
            return p

        pid = int(self._lazy("child", start).pid)
        _CHILD[:] = [pid]
        return pid

    @property
    def attached(self) -> Any:
        from vcpulab import kvm

        return self._lazy("attached", lambda: kvm.attach(self.child_pid))

    def close_figures(self) -> None:
        import matplotlib.pyplot as plt

        plt.close("all")

    def close(self) -> None:
        child = self._cache.get("child")
        if child is not None:
            child.kill()
            child.wait()


def _value(p: Param, name: str, ctx: Ctx) -> Any:
    if p.raw:
        return name
    good = p.good(ctx) if callable(p.good) else p.good
    if name == "np.int64":
        return np.int64(good if isinstance(good, (int, np.integer)) and not isinstance(good, bool) else 1)
    if name == "np.float32":
        return np.float32(good if isinstance(good, (int, float)) and not isinstance(good, bool) else 0.5)
    if name == "'UPPER'":
        return good.upper() if isinstance(good, str) and good else "X"
    if name == "'bogus'":
        return "bogus"
    if name in GENERIC:
        return GENERIC[name]()
    if name in CPU_EXTRA:
        return CPU_EXTRA[name]()
    if name == "pid:1":
        return 1
    if name == "pid:self":
        return os.getpid()
    if name == "pid:child":
        return ctx.child_pid
    if len(name) >= 2 and name[0] == name[-1] == "'":
        return name[1:-1]
    if name.lstrip("-").isdigit():
        return int(name)
    raise KeyError(f"no hostile value named {name}")


def _named(msg: str, names: Iterable[str]) -> bool:
    """Whether the message names one of ``names`` as a word of its own (case-insensitive; a
    plural counts: "seeds" names seed); ``n`` inside "an int" or "by" inside "bytes" does not."""
    m = msg.lower()
    return any(re.search(rf"(?<![a-z0-9_]){re.escape(n.lower())}s?(?![a-z0-9_])", m) for n in names)


def run_case(ctx: Ctx, t: Target, p: Param, vname: str) -> dict[str, Any]:
    import warnings

    value = _value(p, vname, ctx)
    valid = t.valid_ok and p.spec.valid(value, CPUS)
    if valid and p.skip_valid is not None and p.skip_valid(value):
        return {"outcome": "skipped", "message": "valid value too slow for the harness", "valid": True, "s": 0.0}
    if not t.valid_ok and p.spec.valid(value, CPUS):
        return {
            "outcome": "skipped",
            "message": "valid value of a call that would run real trials",
            "valid": True,
            "s": 0.0,
        }
    names = _spec_names(vname) if t.name == "cli sim SPEC.toml" else p.message_names()
    if "{value}" in names:  # the value itself names the problem (a path, a command)
        names = tuple(n for n in names if n != "{value}") + ((str(value),) if str(value) else ())
    t0 = time.perf_counter()
    exc: BaseException | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            t.call(ctx, p.name, value)
        except _Reached:
            pass
        except (_RealWork, _CliHang, _CliCrash) as e:
            exc = e
        except KeyboardInterrupt:
            raise
        except BaseException as e:
            exc = e
    dt = time.perf_counter() - t0
    msg = "" if exc is None else f"{type(exc).__name__}: {exc}"[:400]
    if isinstance(exc, _CliHang):
        return {"outcome": "hang", "message": "the CLI outlived its timeout", "valid": valid, "s": dt}
    if isinstance(exc, _CliCrash):
        return {"outcome": "crash", "message": str(exc), "valid": valid, "s": dt}
    if exc is None:
        outcome = "accepted" if valid else "silent"
    elif isinstance(exc, _RealWork):
        outcome = "silent"
    elif valid:
        outcome = (
            "accepted" if isinstance(exc, t.ran_exc) else "refused" if isinstance(exc, _clean_types()) else "unclear"
        )
    elif not isinstance(exc, _clean_types()) or not _named(str(exc), names):
        outcome = "unclear"
    elif t.ran_exc and isinstance(exc, t.ran_exc):
        outcome = "silent"
    elif t.before_real and dt > 1.0:
        outcome = "silent"
        msg += f" (refused after {dt:.1f} s)"
    else:
        outcome = "clean"
    return {"outcome": outcome, "message": msg, "valid": valid, "s": dt}


def _clean_types() -> tuple[type[BaseException], ...]:
    from vcpulab import VcpulabError

    return (*CLEAN_TYPES, VcpulabError)


def worker(cases_file: str, timeout: float) -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    with open(cases_file) as f:
        todo = [Case(**c) for c in json.load(f)]
    targets = {t.name: t for t in all_targets()}
    ctx = Ctx(timeout)
    os.chdir(ctx.tmp)  # a call that writes a relative path (plot="x") writes there
    out = sys.stdout
    try:
        for c in todo:
            t = targets[c.target]
            p = next(x for x in t.params if x.name == c.param)
            out.write(f"START {c.idx}\n")
            out.flush()
            try:
                r = run_case(ctx, t, p, c.value)
            except Exception as e:  # the harness itself (a fixture that could not be made)
                r = {
                    "outcome": "skipped",
                    "message": f"harness: {type(e).__name__}: {e}"[:400],
                    "valid": None,
                    "s": 0.0,
                }
            out.write("DONE " + json.dumps({"idx": c.idx, **r}) + "\n")
            out.flush()
    finally:
        ctx.close()


# --------------------------------------------------------------------------- the parent

OUTCOMES = ("clean", "silent", "unclear", "hang", "crash", "accepted", "refused", "skipped")


def run_group(
    cases: list[Case], timeout: float, results: dict[int, dict[str, Any]], log: Callable[[str], None]
) -> None:
    """Runs ``cases`` in a worker; restarts it after a hang or a crash."""
    pending = list(cases)
    while pending:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump([c.__dict__ for c in pending], f)
            cases_file = f.name
        err = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", cases_file, "--timeout", str(timeout)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
            env=child_env(),
        )
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        current: int | None = None
        deadline = time.monotonic() + timeout + 60  # the first case includes the worker's start and fixtures
        buf = ""
        done_here: set[int] = set()
        ended = False
        while not ended:
            left = deadline - time.monotonic()
            if left <= 0:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                if current is not None:
                    results[current] = {
                        "outcome": "hang",
                        "message": f"no answer within {timeout:.0f} s",
                        "valid": None,
                        "s": timeout,
                    }
                    done_here.add(current)
                break
            if not sel.select(timeout=min(left, 1.0)):
                continue
            chunk = proc.stdout.readline()
            if not chunk:
                ended = True
                proc.wait()
                if current is not None and current not in done_here:
                    err.seek(0)
                    tail = " | ".join(err.read().strip().splitlines()[-3:])
                    results[current] = {
                        "outcome": "crash",
                        "message": f"worker exited {proc.returncode}: {tail}"[:400],
                        "valid": None,
                        "s": 0.0,
                    }
                    done_here.add(current)
                break
            buf = chunk.strip()
            if buf.startswith("START "):
                current = int(buf.split()[1])
                deadline = time.monotonic() + timeout
            elif buf.startswith("DONE "):
                r = json.loads(buf[5:])
                results[r["idx"]] = r
                done_here.add(r["idx"])
                current = None
        sel.close()
        err.close()
        os.unlink(cases_file)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        else:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the worker's children (an attach target)
            except ProcessLookupError:
                pass
        before = len(pending)
        pending = [c for c in pending if c.idx not in done_here and c.idx not in results]
        if len(pending) == before:  # nothing progressed: the worker cannot start
            for c in pending:
                results[c.idx] = {"outcome": "crash", "message": "the worker did not start", "valid": None, "s": 0.0}
            break
        if pending:
            log(f"  worker restarted after case {current}; {len(pending)} left")


def summarise(cases: list[Case], results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    groups: dict[str, Counter[str]] = defaultdict(Counter)
    target_group = {t.name: t.group for t in all_targets()}
    for c in cases:
        r = results[c.idx]
        groups[target_group[c.target]][r["outcome"]] += 1
    total: Counter[str] = Counter()
    for g in groups.values():
        total.update(g)
    return {"groups": groups, "total": total}


def _pct(cn: Counter[str]) -> float:
    invalid = sum(cn[k] for k in ("clean", "silent", "unclear", "hang", "crash"))
    return 100.0 * cn["clean"] / invalid if invalid else 100.0


def print_report(cases: list[Case], results: dict[int, dict[str, Any]], wall: float) -> dict[str, Any]:
    s = summarise(cases, results)
    cols = OUTCOMES
    head = f"{'group':<12} {'cases':>6} " + " ".join(f"{c:>8}" for c in cols) + f" {'clean %':>8}"
    print(head)
    print("-" * len(head))
    for g in sorted(s["groups"]):
        cn = s["groups"][g]
        print(f"{g:<12} {sum(cn.values()):>6} " + " ".join(f"{cn[c]:>8}" for c in cols) + f" {_pct(cn):>7.1f}%")
    t = s["total"]
    print("-" * len(head))
    print(f"{'total':<12} {sum(t.values()):>6} " + " ".join(f"{t[c]:>8}" for c in cols) + f" {_pct(t):>7.1f}%")
    invalid = sum(t[k] for k in ("clean", "silent", "unclear", "hang", "crash"))
    print(
        f"\n{len(cases)} cases in {wall:.1f} s; {invalid} invalid values, {t['clean']} refused cleanly ({_pct(t):.2f} %)"
    )
    bad = [c for c in cases if results[c.idx]["outcome"] not in ("clean", "accepted", "skipped")]
    if bad:
        print(f"\nnot clean ({len(bad)}):")
        for c in bad:
            r = results[c.idx]
            print(f"  [{r['outcome']}] {c.key}: {r['message'] or '(no exception)'}")
    return s


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick", action="store_true", help="a fixed-seed sample of each parameter's values (under a minute)"
    )
    ap.add_argument("--seed", type=int, default=24, help="the sample's seed (default 24, the issue)")
    ap.add_argument("--only", default=None, help="comma-separated target names (substrings) or groups")
    ap.add_argument("--timeout", type=float, default=30.0, help="per-call timeout, s (default 30)")
    ap.add_argument("--json", default=None, help="write every case's result there")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker, a.timeout)
        return 0
    only = [o.strip() for o in a.only.split(",")] if a.only else None
    cases = enumerate_cases(a.quick, a.seed, only)
    if a.list:
        for c in cases:
            print(c.key)
        return 0
    t0 = time.monotonic()
    results: dict[int, dict[str, Any]] = {}
    by_group: dict[str, list[Case]] = defaultdict(list)
    target_group = {t.name: t.group for t in all_targets()}
    for c in cases:
        by_group[target_group[c.target]].append(c)
    for g, cs in by_group.items():
        g0 = time.monotonic()
        run_group(cs, a.timeout, results, lambda m: print(m, file=sys.stderr))
        print(f"  {g}: {len(cs)} cases, {time.monotonic() - g0:.1f} s", file=sys.stderr)
    s = print_report(cases, results, time.monotonic() - t0)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "total": dict(s["total"]),
                    "clean_pct": _pct(s["total"]),
                    "cases": [{**c.__dict__, **results[c.idx]} for c in cases],
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
