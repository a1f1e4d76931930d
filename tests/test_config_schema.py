"""One schema: the serde structs of src/sim/config/ are the source of truth.
Rust generates a JSON Schema from them (``vcpulab.sim.config_schema()``:
fields, types, defaults, limits, descriptions) and validates every config with
errors that name the field; Python's frozen dataclasses read their limits and
enumerated names from that schema. These tests fail on ANY difference between
the three: a field one side lacks, a default, a limit the validator does not
enforce (or enforces differently), an enum name one side refuses, a field
without documentation on either side."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from typing import Any

import pytest

from vcpulab import _core, sim
from vcpulab.sim import _config as C
from vcpulab.sim import policies, presets
from vcpulab.sim._config import _to_plain

SCHEMA = sim.config_schema()
PHASE_CLASSES = tuple(C._PHASES.values())  # every phase class, new ones included
CLASSES = {name: getattr(sim, name) for name in C.RUST_DEFS} | {c.__name__: c for c in PHASE_CLASSES}

#: Python fields that are not configuration: a Python policy's callable
#: travels beside the JSON, never in it
NOT_IN_SCHEMA = {("Policy", "fn")}


def _fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls) if (cls.__name__, f.name) not in NOT_IN_SCHEMA}


def _props(cls: type) -> dict[str, Any]:
    """The schema's properties of a class (a phase's serde tag "kind" is structure, not a field)."""
    tag = cls in PHASE_CLASSES
    return {k: v for k, v in C.schema_of(cls.__name__)["properties"].items() if not (tag and k == "kind")}


# ------------------------------------------------------------------ fields


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_same_fields_and_required_fields(name: str) -> None:
    cls = CLASSES[name]
    assert set(_fields(cls)) == set(_props(cls)), f"{name}: Python and the Rust schema have different fields"
    required = set(C.schema_of(name).get("required", ())) - ({"kind"} if cls in PHASE_CLASSES else set())
    no_default = {n for n, f in _fields(cls).items() if C._field_default(f) is dataclasses.MISSING}
    assert no_default == required, f"{name}: fields without a default differ"


# ---------------------------------------------------------------- defaults


def _plain_default(f: dataclasses.Field[Any]) -> Any:
    v = C._field_default(f)
    if isinstance(v, tuple) and v and isinstance(v[0], PHASE_CLASSES):
        return [C._phase_to_dict(p) for p in v]
    if isinstance(v, C._Base):
        return v.to_dict()
    return _to_plain(v)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_same_defaults(name: str) -> None:
    cls = CLASSES[name]
    props = _props(cls)
    for n, f in _fields(cls).items():
        if C._field_default(f) is dataclasses.MISSING:
            continue
        d = _plain_default(f)
        if isinstance(d, dict):
            # a nested config: its own class's defaults are checked field by field; here, Rust's
            # default of the whole must be the nested class's defaults (compare what both state)
            rust = props[n]["default"]
            assert {k: v for k, v in rust.items() if k in d} == d, f"{name}.{n}"
            continue
        assert "default" in props[n] or d is None, f"{name}.{n}: Python has default {d!r}, the schema none"
        rust = props[n].get("default")
        if isinstance(d, list) and d and isinstance(d[0], dict):  # Config.vms, Workload.phases
            assert _sub(d, rust), f"{name}.{n}: Python default {d!r} != Rust default {rust!r}"
        else:
            assert d == rust, f"{name}.{n}: Python default {d!r} != Rust default {rust!r}"


def _sub(py: Any, rust: Any) -> bool:
    """Python's plain value states the same as Rust's (a key Python leaves out at its default may be absent)."""
    if isinstance(py, dict):
        return isinstance(rust, dict) and all(k in rust and _sub(v, rust[k]) for k, v in py.items())
    if isinstance(py, list):
        return isinstance(rust, list) and len(py) == len(rust) and all(map(_sub, py, rust))
    return bool(py == rust)


def _walk(obj: Any, rs: Any, path: str, diffs: list[str]) -> None:
    if dataclasses.is_dataclass(obj):
        assert isinstance(rs, dict), f"{path}: Rust has {rs!r} where Python has a {type(obj).__name__}"
        cls = type(obj).__name__
        for n in _fields(type(obj)):
            if n not in rs:  # Rust leaves a field out only at its default (skip_serializing_if)
                if _to_plain(getattr(obj, n)) != C.field_schema(cls, n).get("default"):
                    diffs.append(f"{path}.{n}: not in Rust's JSON, and not at the schema's default")
            else:
                _walk(getattr(obj, n), rs[n], f"{path}.{n}", diffs)
    elif isinstance(obj, (list, tuple)) and obj and dataclasses.is_dataclass(obj[0]):
        assert isinstance(rs, list) and len(rs) == len(obj), f"{path}: {len(obj)} entries in Python, Rust {rs!r}"
        for i, (a, b) in enumerate(zip(obj, rs)):
            _walk(a, b, f"{path}[{i}]", diffs)
    elif _to_plain(obj) != rs:
        diffs.append(f"{path}: Python {_to_plain(obj)!r} != Rust {rs!r}")


def test_python_defaults_are_rust_defaults() -> None:
    # Rust's SimConfig::default() against Python's Config(): every field, recursively
    diffs: list[str] = []
    _walk(sim.Config(), json.loads(_core.sim_default_config()), "Config", diffs)
    assert diffs == []


def test_configs_round_trip_through_rust_unchanged() -> None:
    # what Python writes, Rust reads back (with its defaults filled in) as the same values, every field
    hp = sim.HaltPoll(
        policy="dynamic-v4",
        max_ns=50_000,
        vm_max_ns=40_000,
        v4_start_ns=0,
        v4_idle_ns=5_000_000,
        v3_start_ns=400_000,
        grow_start_ns=5_000,
    )
    cfgs = [
        sim.Config(
            host=sim.Host(
                n_pcpus=8,
                scheduler="cfs",
                tick_skew=True,
                seeded_ties=True,
                wakeup_ipi_ns=1500,
                noise=sim.HostNoise(kthread_hz=50.0, vmm_io_hz=200.0),
                load_balance=True,
                idle_states=sim.IDLE_STATES_SKX,
            ),
            vms=(
                sim.Vm(vcpus=8, count=2, workload=presets.ebizzy_like(), policy=policies.dy_eligible(), halt_poll=hp),
                sim.Vm(vcpus=4, workload=presets.parsec_pipeline_like(), policy=policies.upstream()),
            ),
            duration_ns=2_000_000,
            seed=7,
        ),
        sim.Config(vms=(sim.Vm(vcpus=16, workload=presets.kernbench_like(), policy=policies.baseline_2011()),)),
    ]
    for cfg in cfgs:
        diffs: list[str] = []
        _walk(cfg, json.loads(_core.sim_validate(cfg.to_json())), "Config", diffs)
        assert diffs == []


# ------------------------------------------------------------------- enums


def _enum_fields() -> list[tuple[str, str]]:
    return [(c, n) for c, cls in sorted(CLASSES.items()) for n in _fields(cls) if "enum" in C.field_schema(c, n)]


@pytest.mark.parametrize("name, field", _enum_fields())
def test_every_enum_name_is_accepted_by_python_and_rust(name: str, field: str) -> None:
    f = C.field_schema(name, field)
    cls = CLASSES[name]
    for value in C.choices(name, field):
        obj = _make(cls, {field: value})
        assert getattr(obj, field) == value
        _core.sim_validate(_in_config(obj).to_json())  # Rust reads it
    with pytest.raises(ValueError, match=rf"{name}\.{field} must be one of"):
        _make(cls, {field: "no-such-name"})
    assert set(C.choices(name, field)) | set(f["deprecated_names"]) == set(f["enum"])


def test_python_name_tables_are_the_schemas() -> None:
    assert C.POLICY_KINDS == C.choices("Policy", "kind")
    assert set(C.DISTS) == set(C.choices("Compute", "dist"))
    assert set(C.LOCK_KINDS) == set(C.choices("Lock", "lock_kind"))
    assert set(C.HALT_POLL_POLICIES) == set(C.choices("HaltPoll", "policy"))
    assert set(C.HALT_POLL_OLD_NAMES) <= set(C.field_schema("HaltPoll", "policy")["deprecated_names"])


# ------------------------------------------------------------------ limits

#: edits that make a field's boundary reachable alone (rules across fields)
CONTEXT: dict[tuple[str, str], dict[str, Any]] = {
    ("Host", "sockets"): {"n_pcpus": 4096},
    ("HostNoise", "kthread_hz"): {"kthread_ns": 100},
    ("HostNoise", "vmm_io_hz"): {"vmm_io_ns": 100},
    ("Cfs", "min_granularity_ns"): {"latency_ns": 10**9},
    ("Cfs", "latency_ns"): {"min_granularity_ns": 1000},
    ("Ple", "max"): {"window": 1},
    ("Host", "threads_per_core"): {"n_pcpus": 8},
    ("Vm", "count"): {"vcpus": 1},
    # a running process (both dwells set) whose other level keeps slow_pct <= fast_pct
    ("HostSpeed", "fast_pct"): {"slow_pct": 10, "fast_dwell_ns": 1, "slow_dwell_ns": 1},
    ("HostSpeed", "slow_pct"): {"fast_pct": 1000, "fast_dwell_ns": 1, "slow_dwell_ns": 1},
    ("HostSpeed", "fast_dwell_ns"): {"slow_dwell_ns": 1},
    ("HostSpeed", "slow_dwell_ns"): {"fast_dwell_ns": 1},
}
#: upper bounds that are another field's value (rules across fields, in the
#: validator and the descriptions; tested with their classes): only the minimum here
CROSS_FIELD_MAX = {
    ("Config", "warmup_ns"),
    ("Config", "trace_from_ns"),
    ("Vm", "threads"),
    # a divisor of Vm.vcpus
    ("Guest", "llc_vcpus"),
    ("Guest", "threads_per_core"),
}
#: where the config around a phase needs more vCPUs / threads
VM_CONTEXT: dict[tuple[str, str], dict[str, Any]] = {
    ("Ipi", "targets"): {"vcpus": 65536},
    ("Send", "to"): {"vcpus": 65536},
}


def _make(cls: type, changes: dict[str, Any]) -> Any:
    base: dict[str, Any] = {"Compute": {"ns": 1000}, "Policy": {"name": "p"}, "TaskQueue": {"tasks": 4}}.get(
        cls.__name__, {}
    )
    return cls(**{**base, **changes})


def _in_config(obj: Any, vm: dict[str, Any] | None = None) -> sim.Config:
    """A default config holding obj where its class goes."""
    vm = dict(vm or {})
    name = type(obj).__name__
    if isinstance(obj, PHASE_CLASSES):
        phases: tuple[Any, ...] = (sim.Compute(1000), obj) + ((sim.Send(),) if isinstance(obj, sim.Recv) else ())
        return sim.Config(vms=(sim.Vm(workload=sim.Workload(phases=phases), **vm),))
    if name == "Config":
        return obj  # type: ignore[no-any-return]
    if name == "Host":
        return sim.Config(host=obj)
    if name in ("Background", "HostNoise", "HostSpeed", "Cfs"):
        attr = {"Background": "background", "HostNoise": "noise", "HostSpeed": "speed", "Cfs": "cfs"}[name]
        return sim.Config(host=sim.Host(**{attr: obj}))
    if name == "Vm":
        return sim.Config(vms=(obj,))
    attr = {
        "Ple": "ple",
        "Policy": "policy",
        "Pv": "pv",
        "HaltPoll": "halt_poll",
        "Workload": "workload",
        "Guest": "guest",
    }
    return sim.Config(vms=(sim.Vm(**{attr[name]: obj}, **vm),))


def _rust_json(obj: Any, field: str, value: Any, vm: dict[str, Any] | None = None) -> str:
    """The config JSON with obj's field set to value (past what Python would let through)."""
    cfg = json.loads(_in_config(obj, vm).to_json())
    name = type(obj).__name__
    where: Any
    if isinstance(obj, PHASE_CLASSES):
        where = cfg["vms"][0]["workload"]["phases"][1]
    else:
        paths: dict[str, list[Any]] = {
            "Config": [],
            "Host": ["host"],
            "Background": ["host", "background"],
            "HostNoise": ["host", "noise"],
            "HostSpeed": ["host", "speed"],
            "Cfs": ["host", "cfs"],
            "Vm": ["vms", 0],
        }
        attr = {
            "Ple": "ple",
            "Policy": "policy",
            "Pv": "pv",
            "HaltPoll": "halt_poll",
            "Workload": "workload",
            "Guest": "guest",
        }
        path = paths[name] if name in paths else ["vms", 0, attr[name]]
        where = cfg
        for k in path:
            where = where.setdefault(k, {}) if isinstance(k, str) else where[k]
    where[field] = value
    return json.dumps(cfg)


def _limit_cases() -> list[tuple[str, str]]:
    out = []
    for c, cls in sorted(CLASSES.items()):
        for n in _fields(cls):
            f = C.field_schema(c, n)
            if f.get("type") in ("integer", "number") or "integer" in (f.get("type") or []):
                out.append((c, n))
    return out


@pytest.mark.parametrize("name, field", _limit_cases())
def test_python_and_rust_enforce_the_schemas_limits(name: str, field: str) -> None:
    cls = CLASSES[name]
    f = C.field_schema(name, field)
    ctx, vm = CONTEXT.get((name, field), {}), VM_CONTEXT.get((name, field))
    is_int = "integer" in (f["type"] if isinstance(f["type"], list) else [f["type"]])
    lo, hi, hi_open = C._limits(name, field)
    step = 1 if is_int else max(abs(hi), 1.0) * 1e-6 if math.isfinite(hi) else 1.0
    checked = 0
    # the maximum: accepted by both (an exclusive one refused), one step above refused by both
    if (name, field) not in CROSS_FIELD_MAX and math.isfinite(hi):
        ok = (hi - step) if hi_open else hi
        ok = int(ok) if is_int else ok
        obj = _make(cls, {**ctx, field: ok})
        _core.sim_validate(_rust_json(obj, field, ok, vm))
        bad = int(hi + step) if is_int and not hi_open else (int(hi) if is_int else (hi if hi_open else hi + step))
        with pytest.raises(ValueError, match=rf"{name}\.{field} must"):
            _make(cls, {**ctx, field: bad})
        if "maximum" in f or "exclusiveMaximum" in f:
            # a stated limit, or a type's own range, which serde refuses naming the
            # field's path (a phase's fields only as far as the phase: an internally
            # tagged enum is parsed as a whole)
            where = r"phases\[1\]" if isinstance(obj, PHASE_CLASSES) else rf"\b{field}\b"
            with pytest.raises(ValueError, match=rf"{where}|\b{field}\b"):
                _core.sim_validate(_rust_json(obj, field, bad, vm))
        checked += 1
    # the minimum likewise
    if lo > 0:
        ok = int(lo) if is_int else lo
        obj = _make(cls, {**ctx, field: ok})
        _core.sim_validate(_rust_json(obj, field, ok, vm))
        bad = int(lo - 1) if is_int else lo - max(abs(lo), 1.0) * 1e-6
        with pytest.raises(ValueError, match=rf"{name}\.{field} must"):
            _make(cls, {**ctx, field: bad})
        with pytest.raises(ValueError, match=rf"\b{field}\b"):
            _core.sim_validate(_rust_json(obj, field, bad, vm))
        checked += 1
    elif "minimum" in f or is_int:
        with pytest.raises(ValueError, match=rf"{name}\.{field} must"):
            _make(cls, {**ctx, field: -1})
        checked += 1
    assert checked, f"{name}.{field}: no limit checked"


def test_the_issues_examples_agree() -> None:
    # Rust accepted spin_iter_cycles=10**7 and rq_lock_ns=10**12 while Python refused them
    d = json.loads(_core.sim_default_config())
    d["vms"][0]["workload"]["spin_iter_cycles"] = 10**7
    with pytest.raises(ValueError, match="spin_iter_cycles"):
        _core.sim_validate(json.dumps(d))
    d = json.loads(_core.sim_default_config())
    d["host"]["rq_lock_ns"] = 10**12
    with pytest.raises(ValueError, match="host.rq_lock_ns"):
        _core.sim_validate(json.dumps(d))
    with pytest.raises(ValueError, match="Host.rq_lock_ns"):
        sim.Host(rq_lock_ns=10**12)


# -------------------------------------------------------------------- docs


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_field_is_documented_on_both_sides(name: str) -> None:
    cls = CLASSES[name]
    doc = cls.__doc__ or ""
    for n, p in _props(cls).items():
        assert p.get("description"), f"{name}.{n}: no doc comment on the Rust field"
        assert f"{n}:" in doc or f"``{n}``" in doc, f"{name}.{n}: not documented in {name}'s docstring"


def test_schema_is_the_one_from_rust() -> None:
    assert SCHEMA == json.loads(_core.sim_config_schema())
    assert SCHEMA["$schema"].endswith("2020-12/schema")
    s = sim.config_schema()
    s["properties"].clear()  # a copy: the cached schema is not changed
    assert sim.config_schema()["properties"]
    assert copy.deepcopy(SCHEMA) == sim.config_schema()


# ------------------------------------------------------- rules across fields


#: (a config as Rust's JSON, edited; the field both sides must name). The
#: schema states these rules in its descriptions only; Python and Rust check
#: each, and must refuse the same configs.
def _d(**edits: Any) -> dict[str, Any]:
    d = json.loads(_core.sim_default_config())
    for path, v in edits.items():
        where: Any = d
        keys = [int(k) if k.isdigit() else k for k in path.split("__")]
        for k in keys[:-1]:
            where = where[k]
        where[keys[-1]] = v
    return d


CROSS_FIELD = [
    (_d(warmup_ns=100_000_000), "warmup_ns"),
    (_d(host__n_pcpus=4, host__sockets=8), "sockets"),
    (_d(host__n_pcpus=6, host__threads_per_core=4), "pcpus"),
    (_d(host__idle_states=[[10_000, 20_000], [2_000, 2_000]]), "idle_states"),
    (_d(host__n_pcpus=2, host__vcpu_pcpus=[0, 2]), "vcpu_pcpus"),
    (_d(host__scheduler="pinned", host__affinity="all"), "affinity"),
    (_d(host__noise__kthread_hz=100_000.0, host__noise__kthread_ns=10_000), "kthread_hz"),
    (_d(host__cfs__min_granularity_ns=7_000_000), "min_granularity_ns"),
    (_d(vms__0__ple__window=5000, vms__0__ple__max=4096), "max"),
    (_d(vms__0__vcpus=2, vms__0__threads=33), "threads"),
    (_d(vms__0__count=300, vms__0__vcpus=256), "vcpus"),
    (_d(vms__0__policy__kind="python", vms__0__policy__name=""), "name"),
    (
        _d(vms__0__workload__phases=[{"kind": "ipi", "targets": 4, "handler_ns": 100}, {"kind": "compute", "ns": 10}]),
        "targets",
    ),
    (_d(vms__0__workload__phases=[{"kind": "send", "to": 4}, {"kind": "compute", "ns": 10}]), "to"),
    (_d(vms__0__workload__phases=[{"kind": "recv"}, {"kind": "compute", "ns": 10}]), "recv"),
    (_d(vms__0__workload__phases=[{"kind": "compute", "ns": 0}]), "phases"),
    (
        _d(
            vms__0__workload__phases=[
                {"kind": "lock", "lock": 1, "lock_kind": "tas", "hold_ns": 10},
                {"kind": "lock", "lock": 1, "lock_kind": "mutex", "hold_ns": 10},
            ]
        ),
        "lock_kind",
    ),
    (_d(vms__0__workload__phases=[{"kind": "sleep", "ns": 1000, "dist": "exp", "periodic": True}]), "periodic"),
    (
        _d(
            vms__0__workload__phases=[
                {"kind": "task_queue", "tasks": 4},
                {"kind": "compute", "ns": 10},
                {"kind": "barrier"},
            ]
        ),
        "task_queue",
    ),
    (
        _d(
            vms__0__workload__iterations=3,
            vms__0__workload__phases=[{"kind": "task_queue", "tasks": 4}, {"kind": "compute", "ns": 10}],
        ),
        "task_queue",
    ),
]


@pytest.mark.parametrize("cfg, field", CROSS_FIELD, ids=[f for _, f in CROSS_FIELD])
def test_python_and_rust_refuse_the_same_rules_across_fields(cfg: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        _core.sim_validate(json.dumps(cfg))
    with pytest.raises(ValueError, match=rf"(?i){field}"):
        sim.Config.from_dict(cfg)


# ------------------------------------------------ the JSON Schema against the validator


def _numeric_paths(s: Any, obj: Any, path: list[Any]) -> Any:
    """(path in the config JSON, field schema) of every number below ``obj``."""
    defs = SCHEMA.get("$defs", {})
    while "$ref" in s:
        s = defs[s["$ref"].split("/")[-1]]
    for key in ("anyOf", "oneOf"):
        if key in s:
            for sub in s[key]:
                yield from _numeric_paths(sub, obj, path)
            return
    types = s.get("type") if isinstance(s.get("type"), list) else [s.get("type")]
    if "object" in types and isinstance(obj, dict):
        for k, v in s.get("properties", {}).items():
            if k in obj:
                yield from _numeric_paths(v, obj[k], path + [k])
    elif "array" in types and isinstance(obj, list) and obj:
        yield from _numeric_paths(s.get("items", {}), obj[0], path + [0])
    elif "integer" in types or "number" in types:
        yield path, s


def _boundary_values(s: dict[str, Any]) -> set[Any]:
    is_int = "integer" in (s["type"] if isinstance(s["type"], list) else [s["type"]])
    vals: set[Any] = {0, -1, 1, 2**32, 2**53}
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in s:
            m = s[key]
            step = 1 if is_int else max(abs(m), 1.0) * 1e-9
            vals |= {m, m - step, m + step}
    if not is_int:
        vals |= {0.5, 1e300}
    return {int(v) for v in vals if v == int(v)} if is_int else {float(v) for v in vals}


def test_the_json_schema_and_the_validator_agree_on_every_boundary() -> None:
    # the schema is what editors and other tools check SPECs against: every
    # value at or next to a stated limit (and 0, -1, 2^32, 2^53) must get the
    # same verdict from the schema and from validate(), except where one of the
    # schema's own x-cross-field-rules refuses it (fields of the default config)
    jsonschema = pytest.importorskip("jsonschema")
    check = jsonschema.Draft202012Validator(SCHEMA)
    rules = SCHEMA["x-cross-field-rules"]
    ruled = {f.rsplit(".", 1)[-1] for r in rules for f in r["fields"]}
    base = json.loads(_core.sim_default_config())
    checked, unexplained = 0, []
    for path, s in _numeric_paths(SCHEMA, base, []):
        for v in sorted(_boundary_values(s)):
            if isinstance(v, int) and not -(2**63) <= v < 2**64:
                continue
            d = copy.deepcopy(base)
            where = d
            for k in path[:-1]:
                where = where[k]
            where[path[-1]] = v
            checked += 1
            schema_ok = check.is_valid(d)
            try:
                _core.sim_validate(json.dumps(d))
                valid_ok, msg = True, ""
            except ValueError as e:
                valid_ok, msg = False, str(e)
            if schema_ok == valid_ok:
                continue
            # the validator refused a value the schema allows: only a cross-field rule may
            if schema_ok and any(f in msg for f in ruled):
                continue
            unexplained.append((".".join(map(str, path)), v, schema_ok, msg[:100]))
    assert checked > 500
    assert not unexplained, unexplained


# ------------------------------------------------------- the generated code


def test_the_generated_fields_and_docs_are_the_schemas() -> None:
    """The dataclass fields and ``Attributes:`` sections are written from the
    Rust schema (``python -m vcpulab._codegen``); a Rust field changed without
    regenerating fails here, with the diff."""
    from vcpulab import _codegen

    diffs = _codegen.stale()
    assert not diffs, "run python -m vcpulab._codegen:\n" + "".join(diffs)[:4000]


def _stated_default(token: str, default: Any) -> bool | None:
    """Whether a default stated in prose (``Default 4000000``) is the schema's;
    None where the token is not a value (``Default: the previous CPU``)."""
    if isinstance(default, bool):
        return token.lower() == str(default).lower() if token.lower() in ("true", "false") else None
    if isinstance(default, (int, float)):
        try:
            return float(token.replace("_", "")) == float(default)
        except ValueError:
            return None
    if isinstance(default, str):
        return token == default
    return None


def test_a_default_stated_in_a_fields_doc_is_its_default() -> None:
    """The prose is the documentation users read; where it states the
    default ("Default 4000000 (HZ=250, …)"), it must be the value the
    field has."""
    from vcpulab import _codegen

    checked, wrong = 0, []
    for cls, sch in _codegen._class_schemas().items():
        for name, prop in sch["properties"].items():
            if "default" not in prop:
                continue
            for m in re.finditer(r"\bDefault:? \(?`*\"?([\w.+\-]+)\"?`*", prop.get("description", "")):
                ok = _stated_default(m.group(1).rstrip("."), prop["default"])
                checked += ok is not None
                if ok is False:
                    wrong.append(f"{cls}.{name}: the doc says {m.group(0)!r}, the default is {prop['default']!r}")
    assert checked >= 80, checked  # most fields state theirs
    assert not wrong, "\n".join(wrong)


def test_each_fields_own_check_comes_from_the_schema() -> None:
    """A class without rules across fields has no __post_init__ of its own:
    its fields are checked from the schema alone, with the same messages."""
    for cls in (sim.Background, sim.Pv, sim.Guest, sim.Compute):
        assert "__post_init__" not in vars(cls), cls
    with pytest.raises(ValueError, match=r"^Background.utilization must be in \[0.0, 1.0\), got 1.0$"):
        sim.Background(utilization=1.0)
    with pytest.raises(ValueError, match=r"^Pv.placement must be one of"):
        sim.Pv(placement="nowhere")
    with pytest.raises(ValueError, match=r"^Guest.tick_ns must be >= 100000, got 5$"):
        sim.Guest(tick_ns=5)
    with pytest.raises(ValueError, match=r"^Compute.ns must be an int, got 1.5$"):
        sim.Compute(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^Vm.ple must be a Ple, got 3$"):
        sim.Vm(ple=3)  # type: ignore[arg-type]


def test_policy_kinds_are_their_constructors_names() -> None:
    """One name per concept: a policy's kind is the name of the constructor
    that builds it and its label (``no_yield``, ``baseline_2011``); the names
    before 2026-12-05 are read with a dated DeprecationWarning, by Python and
    by Rust."""
    for name in policies.NAMES:
        p = policies.by_name(name)
        assert p.kind == name == p.label
    for old, new in (("none", "no_yield"), ("baseline2011", "baseline_2011")):
        with pytest.warns(
            DeprecationWarning, match=rf"kind={old!r}\) is deprecated since 2026-12-05; use kind={new!r}"
        ):
            p = sim.Policy(kind=old)
        assert p.kind == new and p.to_dict()["kind"] == new
        d = json.loads(sim.Config().to_json())
        d["vms"][0]["policy"]["kind"] = old  # an old JSON: Rust reads the alias, and the schema says so
        _core.sim_validate(json.dumps(d))
        assert old in C.field_schema("Policy", "kind")["deprecated_names"]
    assert "none" not in C.POLICY_KINDS and C.POLICY_KINDS == C.choices("Policy", "kind")


def test_a_renamed_field_keeps_its_old_name_with_a_dated_warning_in_python_and_rust() -> None:
    """``Host.pcpus`` (a count) became ``Host.n_pcpus`` on 2026-12-05, so that
    ``pcpus`` is a list of CPU ids everywhere. Rust reads the old key as a
    serde alias and lists it in the schema (``x-renamed-fields``); Python
    reads that list and takes the old name in the constructor, as an
    attribute, in ``from_dict`` and in a path, each with a DeprecationWarning
    that names the new name and the date; the old and the new name together
    are refused. A config built either way has one JSON, under the new name."""
    renamed = {
        (cls, old): r["to"]
        for cls, d in C.RUST_DEFS.items()
        for old, r in (_core_schema_def(d).get("x-renamed-fields") or {}).items()
    }
    assert renamed == {("Host", "pcpus"): "n_pcpus"}
    new_style = sim.Config(host=sim.Host(n_pcpus=6))
    warned = r"Host.pcpus=?\S* is deprecated since 2026-12-05; use n_pcpus"
    with pytest.warns(DeprecationWarning, match=warned):
        h = sim.Host(pcpus=6)
    assert h == new_style.host and "pcpus" not in h.to_dict()
    with pytest.warns(DeprecationWarning, match=warned):
        assert h.pcpus == 6
    with pytest.warns(DeprecationWarning, match="Host.from_dict: Host.pcpus is deprecated since 2026-12-05"):
        assert sim.Config.from_dict({"host": {"pcpus": 6}}) == new_style
    with pytest.warns(DeprecationWarning, match="path 'host.pcpus': Host.pcpus is deprecated"):
        assert sim.Config().with_path("host.pcpus", 6) == new_style
    with pytest.warns(DeprecationWarning, match="Host.pcpus is deprecated"):
        df = sim.sweep(sim.Config(duration_ns=1_000_000), {"host.pcpus": [6]}, progress=False)
    assert (
        df["n_pcpus"].to_list() == [6]
        and df["config_hash"][0] == new_style.replace(duration_ns=1_000_000).config_hash()
    )
    with pytest.raises(TypeError, match="pcpus is the deprecated name of n_pcpus"):
        sim.Host(pcpus=6, n_pcpus=6)
    with pytest.raises(ValueError, match="under its old and its new name"):
        sim.Host.from_dict({"pcpus": 6, "n_pcpus": 6})
    # Rust: the old key is read, the new one written; both at once are refused
    d = json.loads(new_style.to_json())
    d["host"]["pcpus"] = d["host"].pop("n_pcpus")
    _core.sim_validate(json.dumps(d))
    d["host"]["n_pcpus"] = 6
    with pytest.raises(ValueError, match="duplicate field"):
        _core.sim_validate(json.dumps(d))
    # the sched map's row count, the same rename
    from vcpulab import plot

    r = sim.run(sim.Config(host=sim.Host(n_pcpus=2), duration_ns=1_000_000, trace=True))
    with pytest.warns(DeprecationWarning, match=r"sched_map_codes\(pcpus=...\) is deprecated since 2026-12-05"):
        assert plot.sched_map_codes(r, pcpus=3).shape[0] == 3
    assert r.summary["n_pcpus"].to_list() == [2]


def _core_schema_def(d: str) -> dict[str, Any]:
    s = json.loads(_core.sim_config_schema())
    return s if d == "" else s["$defs"][d]  # type: ignore[no-any-return]


def test_lock_sites_are_checked_against_the_last_lock_id() -> None:
    """``Lock.sites``: a rule across fields (the last site, ``lock + sites - 1``,
    is a lock id within the schema's limit), and sites overlapping a later
    phase's lock must agree on the kind; Rust says the same."""
    assert sim.Lock(1000, sites=24).sites == 24
    with pytest.raises(ValueError, match=r"^Lock.sites must be <= 24, got 25$"):
        sim.Lock(1000, sites=25)
    with pytest.raises(ValueError, match=r"^Lock.sites must be >= 1, got 0$"):
        sim.Lock(sites=0)
    with pytest.raises(ValueError, match=r"phases\[1\].lock_kind differs from an earlier phase using lock 3"):
        sim.Workload(phases=(sim.Lock(0, "ticket", 100, sites=4), sim.Lock(3, "mutex", 100)))
    assert "sites" not in sim.Lock().to_dict(), "the default leaves the JSON and config_hash as they were"
    raw = sim.Config(vms=(sim.Vm(workload=sim.Workload(phases=(sim.Lock(0, sites=8),))),)).to_json()
    assert '"sites": 8' in raw or '"sites":8' in raw


def test_a_list_of_ints_is_checked_from_the_schema_and_kept_as_a_tuple() -> None:
    """``Pv.guest_idle_poll_vcpus`` and ``Host.vcpu_pcpus``: bytes and strings
    (sequences of ints or characters), non-ints and values outside the items'
    limits are refused naming the field and the entry; numpy integers are
    kept as ints. bytes used to pass and fail later in JSON with TypeError."""
    import numpy as np

    with pytest.raises(ValueError, match=r"^Pv.guest_idle_poll_vcpus must be a tuple of ints, got bytes b'x'$"):
        sim.Pv(guest_idle_poll_vcpus=b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^Pv.guest_idle_poll_vcpus\[1\] must be an int in \[0, 4294967295\]"):
        sim.Pv(guest_idle_poll_vcpus=(1, True))
    with pytest.raises(ValueError, match=r"^Host.vcpu_pcpus must be a tuple of ints, got str"):
        sim.Host(n_pcpus=4, vcpu_pcpus="01")  # type: ignore[arg-type]
    pv = sim.Pv(guest_idle_poll_vcpus=[np.int64(1), 2])  # type: ignore[arg-type]
    assert pv.guest_idle_poll_vcpus == (1, 2) and all(type(x) is int for x in pv.guest_idle_poll_vcpus)
