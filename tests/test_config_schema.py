"""The simulator's configuration is defined twice — the serde structs in
src/sim/config.rs (which validate and run it) and the frozen dataclasses in
python/vcpulab/sim/_config.py (which users write). These tests walk both, field
by field, so that the two cannot drift apart silently: the same fields, the same
defaults, and a configuration that survives the round trip through Rust
unchanged. Fields Rust has and Python cannot set are listed in KNOWN_GAPS; a
new gap, or a gap closed without updating the list, fails."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from vcpulab import _core, sim
from vcpulab.sim import policies, presets
from vcpulab.sim._config import _to_plain

#: Rust name -> Python name where the two differ (the engine's halt-poll
#: config is the calibration model's type; Python keeps the engine's names)
ALIASES = {"HaltPoll": {"halt_poll_ns": "max_ns", "grow_start": "grow_start_ns"}}

#: Keys that are structure, not fields: a phase's serde tag; a Python policy's
#: callable (it travels beside the JSON, never in it)
STRUCTURAL = {("Compute", "kind"), ("Lock", "kind"), ("Sleep", "kind"), ("Barrier", "kind"), ("Ipi", "kind"),
              ("Send", "kind"), ("Recv", "kind"), ("Policy", "fn")}  # fmt: skip

#: Rust fields that Python's classes cannot set yet (issue #16, item 1: one
#: schema). The halt-poll window parameters of dynamic-v3 / dynamic-v4 keep
#: their kernel-derived defaults in the engine.
KNOWN_GAPS = {"HaltPoll.vm_max_ns", "HaltPoll.v4_start_ns", "HaltPoll.v4_idle_ns", "HaltPoll.v3_start_ns"}


def _walk(obj: Any, rs: Any, path: str, gaps: set[str], diffs: list[str]) -> None:
    if dataclasses.is_dataclass(obj):
        cls = type(obj).__name__
        names = {f.name for f in dataclasses.fields(obj)}
        alias = ALIASES.get(cls, {})
        assert isinstance(rs, dict), f"{path}: Rust has {rs!r} where Python has a {cls}"
        for k, v in rs.items():
            n = alias.get(k, k)
            if (cls, k) in STRUCTURAL:
                continue
            if n not in names:
                gaps.add(f"{cls}.{k}")
                continue
            _walk(getattr(obj, n), v, f"{path}.{n}", gaps, diffs)
        for f in dataclasses.fields(obj):
            if f.name in {alias.get(k, k) for k in rs} or (cls, f.name) in STRUCTURAL:
                continue
            # Rust leaves a field out of its JSON only at its default (skip_serializing_if), so
            # Python's value must be that default too
            if f.default is dataclasses.MISSING or getattr(obj, f.name) != f.default:
                diffs.append(f"{path}.{f.name}: a Python field Rust does not have (or left out at a non-default)")
    elif isinstance(obj, (list, tuple)) and obj and dataclasses.is_dataclass(obj[0]):
        assert isinstance(rs, list) and len(rs) == len(obj), f"{path}: {len(obj)} entries in Python, Rust {rs!r}"
        for i, (a, b) in enumerate(zip(obj, rs)):
            _walk(a, b, f"{path}[{i}]", gaps, diffs)
    elif _to_plain(obj) != rs:
        diffs.append(f"{path}: Python {_to_plain(obj)!r} != Rust {rs!r}")


def _compare(cfg: sim.Config, rust_json: str) -> tuple[set[str], list[str]]:
    gaps: set[str] = set()
    diffs: list[str] = []
    _walk(cfg, json.loads(rust_json), "Config", gaps, diffs)
    return gaps, diffs


def test_python_defaults_are_rust_defaults() -> None:
    # Rust's SimConfig::default() against Python's Config(): every field both have, recursively
    gaps, diffs = _compare(sim.Config(), _core.sim_default_config())
    assert diffs == []
    assert gaps == KNOWN_GAPS, "Rust fields Python cannot set changed: update the Python classes or KNOWN_GAPS"


def test_configs_round_trip_through_rust_unchanged() -> None:
    # what Python writes, Rust reads back (with its defaults filled in) as the same values
    cfgs = [
        sim.Config(
            host=sim.Host(pcpus=8, scheduler="cfs", tick_skew=True, seeded_ties=True, wakeup_ipi_ns=1500,
                          noise=sim.HostNoise(kthread_hz=50.0, vmm_io_hz=200.0), load_balance=True),  # fmt: skip
            vms=(
                sim.Vm(vcpus=8, count=2, workload=presets.ebizzy_like(), policy=policies.dy_eligible(),
                       halt_poll=sim.HaltPoll(policy="block-time", max_ns=50_000)),  # fmt: skip
                sim.Vm(vcpus=4, workload=presets.parsec_pipeline_like(), policy=policies.upstream()),
            ),
            duration_ns=2_000_000,
            seed=7,
        ),
        sim.Config(vms=(sim.Vm(vcpus=16, workload=presets.kernbench_like(), policy=policies.baseline_2011()),)),
    ]
    for cfg in cfgs:
        gaps, diffs = _compare(cfg, _core.sim_validate(cfg.to_json()))
        assert diffs == []
        assert gaps <= KNOWN_GAPS
