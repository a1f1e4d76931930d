"""Writes the simulator's configuration classes from the Rust schema.

The fields of every configuration class ([`Host`][vcpulab.sim.Host],
[`Vm`][vcpulab.sim.Vm], the phases, …) — their names, order, types,
defaults and documentation — are stated once, in the serde structs of
src/sim/config/ (a field's doc comment is its documentation, its
``#[schemars(...)]`` attributes its limits). This module writes them into
the Python classes, between the markers::

    # BEGIN GENERATED FIELDS (Host): python -m vcpulab._codegen
    ...
    # END GENERATED FIELDS

and as each class docstring's ``Attributes:`` section (everything from that
line to the docstring's end). What stays hand-written is each class's
summary, its methods, and the rules across fields in ``__post_init__``;
each field's own check (type, limits, names) runs from the schema
(``_base._Base._check_fields``).

Run after changing a Rust config struct and rebuilding::

    python -m vcpulab._codegen          # rewrite the files
    python -m vcpulab._codegen --check  # exit 1 if a file would change

``tests/test_config_schema.py`` runs the check, so CI fails when the Python
classes are not the schema's (as pydantic-core checks its self-schema).
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

#: Python class -> the schema's definition ("" = the root, SimConfig)
RUST_DEFS = {
    "Config": "",
    "Host": "HostConfig",
    "Background": "Background",
    "HostNoise": "HostNoise",
    "HostSpeed": "HostSpeed",
    "Cfs": "CfsConfig",
    "Ple": "PleConfig",
    "Policy": "PolicyConfig",
    "Pv": "PvConfig",
    "HaltPoll": "HaltPollConfig",
    "Workload": "WorkloadConfig",
    "Guest": "GuestConfig",
    "Vm": "VmConfig",
}

#: the modules that define configuration classes
FILES = ("sim/_config.py", "sim/_workload.py", "sim/_halt_poll_config.py", "sim/_policy.py")
#: the phase classes: serde tag (``kind``) -> Python class name
PHASES = {
    "compute": "Compute",
    "lock": "Lock",
    "ipi": "Ipi",
    "barrier": "Barrier",
    "sleep": "Sleep",
    "send": "Send",
    "recv": "Recv",
    "task_queue": "TaskQueue",
}
BEGIN = "    # BEGIN GENERATED FIELDS ({name}): python -m vcpulab._codegen"
END = "    # END GENERATED FIELDS"
#: the docstring's field section (Google style, as mkdocstrings reads it)
WIDTH = 100


@functools.cache
def _schema() -> dict[str, Any]:
    from vcpulab import _core  # the Rust core only: this module must run while the classes are broken

    out: dict[str, Any] = json.loads(_core.sim_config_schema())
    return out


@functools.cache
def _class_schemas() -> dict[str, dict[str, Any]]:
    """Python class name -> its schema object (``properties``, ``required``)."""
    s = _schema()
    out = {py: (s if d == "" else s["$defs"][d]) for py, d in RUST_DEFS.items()}
    for v in s["$defs"]["Phase"]["oneOf"]:
        out[PHASES[v["properties"]["kind"]["const"]]] = v
    return out


def _def_name(ref: str) -> str:
    return ref.rsplit("/", 1)[1]


def _annotation(prop: dict[str, Any]) -> str:
    """The Python type of a field, from its schema."""
    py_of = {d: py for py, d in RUST_DEFS.items() if d}
    ref = prop.get("$ref")
    if ref:
        d = _def_name(ref)
        if d == "Phase":
            return "Phase"
        return py_of.get(d, "str")  # a struct, or an enum of names
    t = prop.get("type")
    if isinstance(t, list):
        (inner,) = [x for x in t if x != "null"]
        return f"{_annotation(prop | {'type': inner})} | None"
    if t == "array":
        items = prop["items"]
        if "prefixItems" in items:
            inner = ", ".join(_annotation(x) for x in items["prefixItems"])
            return f"tuple[tuple[{inner}], ...]"
        return f"tuple[{_annotation(items)}, ...]"
    return {"integer": "int", "number": "float", "boolean": "bool", "string": "str"}[str(t)]


def _literal(v: Any, prop: dict[str, Any]) -> str:
    """Python source of the value ``v`` of a field whose schema is ``prop``:
    a struct as its class called with the fields that differ from their
    defaults (``Vm()``, ``Compute(ns=20_000, dist="exp")``), a list as a tuple."""
    schemas = _class_schemas()
    ref = prop.get("$ref")
    if isinstance(v, dict):
        cls = PHASES[v["kind"]] if ref and _def_name(ref) == "Phase" else _annotation(prop)
        sch = schemas[cls]
        req = set(sch.get("required", ()))
        kw = [
            f"{k}={_literal(x, sch['properties'][k])}"
            for k, x in v.items()
            if k != "kind" and (k in req or x != sch["properties"][k].get("default"))
        ]
        return f"{cls}({', '.join(kw)})"
    if isinstance(v, list):
        items = [_literal(x, prop["items"]) for x in v]
        return "()" if not items else "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, int):
        return f"{v:_}" if abs(v) >= 10_000 else str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise ValueError(f"no Python literal for the default {v!r}")


def _field_line(name: str, prop: dict[str, Any], required: bool) -> str:
    ann = _annotation(prop)
    if required:
        return f"    {name}: {ann}"
    value = _literal(prop.get("default"), prop)
    if value == f"{ann}()":  # a struct at its class's defaults: a fresh one each time
        args = f"default_factory={ann}"
    elif isinstance(prop.get("default"), dict):
        args = f"default_factory=lambda: {value}"
    else:
        args = f"default={value}"
    if prop.get("x-omit-default", False):
        return f"    {name}: {ann} = field({args}, metadata=_NEW)"
    if args.startswith("default="):
        return f"    {name}: {ann} = {value}"
    return f"    {name}: {ann} = field({args})"


def _fields(cls: str, sch: dict[str, Any]) -> list[str]:
    req = set(sch.get("required", ()))
    lines, seen_default = [], False
    for name, prop in sch["properties"].items():
        if name == "kind" and cls in PHASES.values():
            continue  # the serde tag: a ClassVar of the phase class
        required = name in req
        if required and seen_default:
            raise ValueError(f"{cls}.{name}: a required field after one with a default (reorder the Rust struct)")
        seen_default |= not required
        lines.append(_field_line(name, prop, required))
    return lines


def _attributes(cls: str, sch: dict[str, Any]) -> list[str]:
    """The docstring's ``Attributes:`` section: each field's doc comment,
    rewrapped, plus its default where the comment does not state one."""
    out = ["    Attributes:"]
    for name, prop in sch["properties"].items():
        if name == "kind" and cls in PHASES.values():
            continue
        text = prop.get("description", "").strip()
        if not text:
            raise ValueError(f"{cls}.{name}: no doc comment on the Rust field")
        if "default" in prop and not re.search(r"\bdefault\b", text, re.IGNORECASE):
            text += f" Default ``{_literal(prop['default'], prop)}``."
        for i, para in enumerate(re.split(r"\n\s*\n", text)):
            head = f"{name}: " if i == 0 else ""
            lines = textwrap.wrap(
                head + " ".join(para.split()), WIDTH - 12, break_on_hyphens=False, break_long_words=False
            )
            out += [("        " if i == 0 and j == 0 else "            ") + w for j, w in enumerate(lines)]
    return out


def _replace_class(text: str, cls: str, sch: dict[str, Any], path: str) -> str:
    m = re.search(rf"^class {cls}\(.*\):\n", text, re.MULTILINE)
    if not m:
        raise ValueError(f"{path}: no class {cls}")
    start = m.end()
    nxt = re.search(r"^\S", text[start:], re.MULTILINE)
    end = start + nxt.start() if nxt else len(text)
    body = text[start:end]
    lines = body.split("\n")
    # the docstring: from its first line to the line that closes it
    if not lines[0].lstrip().startswith('"""'):
        raise ValueError(f"{path}: {cls} has no docstring")
    close = 0 if lines[0].count('"""') == 2 else next(i for i in range(1, len(lines)) if '"""' in lines[i])
    head, _, _ = lines[close].rpartition('"""')
    summary = [*lines[:close], head.rstrip()] if head.strip() else lines[:close]
    if "    Attributes:" in summary:
        summary = summary[: summary.index("    Attributes:")]
    while summary and not summary[-1].strip():
        summary.pop()
    doc = [*summary, "", *_attributes(cls, sch), '    """']
    rest = lines[close + 1 :]
    begin = BEGIN.format(name=cls)
    try:
        b = rest.index(begin)
        e = rest.index(END, b)
    except ValueError:
        raise ValueError(f"{path}: {cls} has no {begin!r} … {END!r} block") from None
    rest = rest[: b + 1] + _fields(cls, sch) + rest[e:]
    return text[:start] + "\n".join(doc + rest) + text[end:]


def render(root: Path) -> dict[Path, str]:
    """Every file with its generated parts rewritten from the schema."""
    schemas = _class_schemas()
    out: dict[Path, str] = {}
    for f in FILES:
        path = root / f
        text = path.read_text()
        for cls, sch in schemas.items():
            if re.search(rf"^class {cls}\(", text, re.MULTILINE):
                text = _replace_class(text, cls, sch, f)
        out[path] = text
    return out


def stale(root: Path | None = None) -> list[str]:
    """Unified diffs of the files whose generated parts differ from the schema's (empty: current)."""
    root = root or Path(__file__).parent
    diffs = []
    for path, new in render(root).items():
        old = path.read_text()
        if old != new:
            diffs.append(
                "".join(
                    difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(path), f"{path} (generated)")
                )
            )
    return diffs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vcpulab._codegen", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 (with the diff) if a file would change")
    args = p.parse_args(argv)
    root = Path(__file__).parent
    if args.check:
        diffs = stale(root)
        sys.stdout.write("".join(diffs))
        if diffs:
            print("the configuration classes differ from the Rust schema: run python -m vcpulab._codegen")
        return 1 if diffs else 0
    for path, new in render(root).items():
        if path.read_text() != new:
            path.write_text(new)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
