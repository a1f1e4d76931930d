"""docs/spec.schema.json, the JSON Schema of a SPEC.toml (``vcpulab sim``),
is generated from the Rust configuration structs (``vcpulab schema``); the
committed copy must be current, and every example SPEC in the repository must
validate against it and load."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from vcpulab import cli

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "docs" / "spec.schema.json"
REGENERATE = "vcpulab schema > docs/spec.schema.json"


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(COMMITTED.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_committed_schema_is_current() -> None:
    assert json.loads(COMMITTED.read_text()) == cli.spec_schema(), f"docs/spec.schema.json is stale: run `{REGENERATE}`"


def _examples() -> list[tuple[str, str]]:
    out = [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "examples").glob("*.toml"))]
    # the example in `vcpulab sim --help` (its indented lines)
    out.append(("vcpulab sim --help", "\n".join(ln[2:] for ln in cli.SPEC_HELP.splitlines() if ln.startswith("  "))))
    for md in sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")]):
        for i, block in enumerate(re.findall(r"```toml\n(.*?)```", md.read_text(), re.S)):
            out.append((f"{md.relative_to(ROOT)} toml block {i}", block))
    return out


@pytest.mark.parametrize("name, text", _examples(), ids=[n for n, _ in _examples()])
def test_every_example_spec_validates_and_loads(name: str, text: str, tmp_path: Path) -> None:
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(tomllib.loads(text))
    ]
    assert errors == [], name
    p = tmp_path / "spec.toml"
    p.write_text(text)
    cli.load_spec(p)


BASE = tomllib.loads((ROOT / "examples" / "ple_policies.toml").read_text())


def _with(**sections: Any) -> dict[str, Any]:
    d = json.loads(json.dumps(BASE))
    for k, v in sections.items():
        d[k] = v
    return d


@pytest.mark.parametrize(
    "spec, what",
    [
        (_with(extra={}), "extra"),
        (_with(output={"sched_map": True, "pixels": 3}), "pixels"),
        (_with(output={"us_per_pixel": 0}), "us_per_pixel"),
        (_with(config={"host": {"n_pcpus": 0}}), "n_pcpus"),
        (_with(config={"host": {"rq_lock_ns": 10**12}}), "rq_lock_ns"),
        (_with(config={"vms": [{"policy": "no_such_policy"}]}), "policy"),
        (_with(config={"vms": [{"halt_poll": {"policy": "sometimes"}}]}), "policy"),
        (_with(grid={"seed": 3}), "seed"),
    ],
)
def test_schema_and_loader_refuse_the_same_bad_specs(spec: dict[str, Any], what: str, tmp_path: Path) -> None:
    assert list(_validator().iter_errors(spec)), f"the schema accepts a bad {what}"
    p = tmp_path / "bad.toml"
    p.write_text(_toml(spec))
    with pytest.raises(ValueError, match=what):
        cli.load_spec(p)


def _toml(d: dict[str, Any]) -> str:
    """A minimal TOML writer for the test's specs (tables of scalars, lists, tables, arrays of tables)."""

    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {val(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return json.dumps(v)

    return "\n".join(f"{k} = {val(v)}" for k, v in d.items())


def test_cli_prints_the_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == cli.spec_schema()
    assert cli.main(["schema", "--config"]) == 0
    assert json.loads(capsys.readouterr().out)["$defs"]["HostConfig"]["properties"]["n_pcpus"]["maximum"] == 4096
