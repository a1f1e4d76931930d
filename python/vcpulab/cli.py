"""The ``vcpulab`` command.

    vcpulab info                         what KVM offers on this host (or exactly why it is unusable)
    vcpulab kvm steal --vcpus 4 --pcpus 0 --duration-s 2
                                         a real overcommit run printing steal per vCPU
    vcpulab sim SPEC.toml [--out DIR] [--json]
                                         a simulated run or sweep described in TOML
    vcpulab schema [--config]            the JSON Schema of a SPEC.toml (or of the configuration)
    vcpulab demo [--out DIR]             a short showcase; writes Parquet files and pictures
    vcpulab watch PID | --pid PID | --guest NAME [--interval-s S] [--count N | --once]
                  [--json] [--refresh | --no-refresh] [--log FILE] [--parquet FILE]
                                         a live per-vCPU table of another process's VMs
    vcpulab trace PID [--duration-s S] [--out DIR] [--json]
                                         trace another process's vCPU threads: exits by reason,
                                         halts, wake-up latency; the frames as Parquet

Every command takes ``--help``; ``vcpulab --version`` names the build.
``info``, ``kvm steal``, ``sim``, ``trace`` and ``watch`` take ``--json``:
what the command produced as JSON on stdout (``watch``: one object per
interval), the lines meant for a person on stderr.

``watch`` chooses its process as ``kvm_stat`` does: by PID (``--pid``, ``-p``
there) or by ``--guest NAME`` (``-g``), the one process holding a KVM VM whose
QEMU guest name (``-name guest=NAME,...`` or ``-name NAME``), comm or program
name is NAME; none or several is an error naming the KVM processes found. On a
terminal it redraws its table in place (clear screen, home; ``--no-refresh``
scrolls, ``--refresh`` redraws anyway); elsewhere, and with ``--json``, it
prints one table after another.

Bad arguments give one clear line on stderr and exit status 2; a failure of
the run itself exits with 1 (one line, no traceback; ``VCPULAB_TRACEBACK=1``
shows it). With ``--json``, a failure also prints one object on stdout,
``{"error": {"type": "<exception class>", "message": "..."}}``, with the
same exit status and stderr line (``vcpulab watch 999999999 --json``:
``{"error": {"type": "ProcessLookupError", "message": "no process
999999999"}}``, status 1). Usage errors that argparse finds (an unknown flag,
a malformed value, a missing argument) stay plain text on stderr, status 2,
with or without ``--json``. Output closed early (``| head``) ends the command
quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

__all__ = [
    "MAX_CPU_ID",
    "SPEC_HELP",
    "SPEC_OUTPUT_KEYS",
    "build_parser",
    "load_spec",
    "main",
    "parse_cpu_list",
    "sim_config_schema",
    "spec_schema",
]

if TYPE_CHECKING:
    from vcpulab.sim import Config


class _Failed(Exception):
    """A failure a command reports: ``error`` (the exception, whose class and
    message ``--json`` prints), the exit status and the stderr line. Raised by
    the commands, reported by `main` (the one place that knows ``--json``)."""

    def __init__(self, error: BaseException, code: int = 1, line: str | None = None) -> None:
        super().__init__(str(error))
        self.error, self.code = error, code
        self.line = line if line is not None else f"vcpulab: error: {error}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one clear line, exit 2
        print(f"vcpulab: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {s!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected a positive, finite number, got {s!r}")
    return v


def _at_most(hi: float, what: str) -> Any:
    """An argparse type: a positive number (int when ``hi`` is an int) of at most ``hi``."""

    def parse(s: str) -> float:
        v: float = _positive_int(s) if isinstance(hi, int) else _positive_float(s)
        if v > hi:
            raise argparse.ArgumentTypeError(f"expected at most {hi:g} {what}, got {s!r}")
        return v

    return parse


def _threads(s: str) -> int:
    """--threads: a positive int of at most vcpulab.sim.MAX_THREADS (imported only when given)."""
    from vcpulab.sim import MAX_THREADS

    v = _positive_int(s)
    if v > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_THREADS} threads (vcpulab.sim.MAX_THREADS), got {s!r}")
    return v


def _nonempty_name(s: str) -> str:
    if not s.strip():
        raise argparse.ArgumentTypeError(f"expected a name, got {s!r}")
    return s


def _nonempty(s: str) -> str:
    if not s:
        raise argparse.ArgumentTypeError("expected a path, got ''")
    return s


def _version_line() -> str:
    from vcpulab.provenance import dependency_versions, version

    deps = ", ".join(f"{k} {v}" for k, v in dependency_versions().items())
    return f"vcpulab {version()} ({deps})"


class _VersionAction(argparse.Action):
    """``--version``: one unwrapped line, computed only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(_version_line())
        parser.exit()


def cmd_info(args: argparse.Namespace) -> int:
    from vcpulab.kvm import Host, KvmUnavailableError, module_params, virtualization

    try:
        host = Host(args.device)
    except KvmUnavailableError as e:
        raise _Failed(e, line=f"vcpulab: {e}") from e
    if args.json:
        print(
            json.dumps(
                {
                    "api_version": host.api_version,
                    "max_vcpus": host.max_vcpus,
                    "virtualization": virtualization(),
                    "capabilities": host.capabilities,
                    "pv_features": host.pv_features,
                    "module_params": module_params(),
                },
                indent=2,
                default=str,
            )
        )
        return 0
    print(f"/dev/kvm: API version {host.api_version}, max vCPUs {host.max_vcpus}, virtualization {virtualization()}")
    print("capabilities:")
    for name, value in host.capabilities.items():
        print(f"  {name:<30} {value}")
    print(f"  exits that can be disabled:    {', '.join(sorted(host.disable_exits_allowed)) or 'none'}")
    pv = host.pv_features
    print("KVM PV features (CPUID 0x40000001):", ", ".join(n for n, on in pv.items() if on))
    print("module parameters:")
    for mod, params in module_params().items():
        print(f"  {mod}: " + ", ".join(f"{k}={v}" for k, v in params.items()))
    if not any(m in module_params() for m in ("kvm_intel", "kvm_amd")):
        print("  (no kvm_intel/kvm_amd: no pause-loop-exit parameters on this host)")
    return 0


def _steal_rows(run) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    import polars as pl

    f = run.steal_fraction().join(
        run.threads.select("vm", "vcpu", "run_delay_ns", "wall_ns", "cpus"), on=["vm", "vcpu"]
    )
    f = f.with_columns((pl.col("run_delay_ns") / pl.col("wall_ns")).alias("run_delay_fraction"))
    keep = ["vm", "vcpu", "cpus", "steal_fraction", "run_delay_fraction", "run_delay_ns", "wall_ns"]
    return [{k: r[k] for k in keep if k in r} for r in f.iter_rows(named=True)]


def _steal_table(run) -> str:  # type: ignore[no-untyped-def]
    lines = [f"{'vCPU':>5} {'host CPUs':>10} {'steal':>8} {'run delay':>10}"]
    for r in _steal_rows(run):
        lines.append(
            f"{r['vcpu']:>5} {','.join(map(str, r['cpus'])):>10} {r['steal_fraction']:>8.1%} {r['run_delay_fraction']:>10.1%}"
        )
    return "\n".join(lines)


#: the largest host CPU id a CPU list may name (as pcpus= entries in Python)
MAX_CPU_ID = 2**16 - 1


def parse_cpu_list(s: str) -> list[int]:
    """Host CPU ids in the kernel's cpulist syntax (``0``, ``0,2``, ``0-3,6``):
    what ``--pcpus`` takes, the same list as ``pcpus=`` in Python: ``--pcpus 1``
    is host CPU 1, as ``pcpus=[1]``.

    ``--pcpus N`` was once a count of CPUs, and for a while a bare number
    other than 0 was refused so that old commands could not change meaning
    silently; since 2026-12-01 it is the one CPU it names. CPU ids above
    65535 are refused (a range that large is a typo, not a machine).
    """
    cpus: list[int] = []
    text = s.strip()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise argparse.ArgumentTypeError(f"expected a CPU list like 0 or 0,2 or 0-3, got {s!r}")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise argparse.ArgumentTypeError(f"CPU range {part!r} runs backwards")
        if b > MAX_CPU_ID:
            raise argparse.ArgumentTypeError(f"CPU id {b} is out of range (at most {MAX_CPU_ID}), in {s!r}")
        cpus.extend(range(a, b + 1))
    return sorted(set(cpus))


def cmd_kvm_steal(args: argparse.Namespace) -> int:
    from vcpulab import _core
    from vcpulab.experiment import Spin, run

    allowed = sorted(_core.allowed_cpus())
    pcpus = args.pcpus if args.pcpus is not None else allowed[:1]
    bad = [c for c in pcpus if c not in allowed]
    if bad:
        raise _Failed(ValueError(f"--pcpus names CPU(s) {bad} but this process may use only CPUs {allowed}"), code=2)
    r = run(Spin(), vcpus=args.vcpus, pcpus=pcpus, duration_s=args.duration_s, sample_every_s=0.01, warn_quality=False)
    fair = 1 - min(1, len(pcpus) / args.vcpus)
    if args.json:
        rows = _steal_rows(r)
        print(
            json.dumps(
                {
                    "vcpus": args.vcpus,
                    "pcpus": pcpus,
                    "wall_s": r.wall_s,
                    "fair_share_steal_fraction": fair,
                    "per_vcpu": rows,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"{args.vcpus} vCPUs on host CPU(s) {','.join(map(str, pcpus))} for {r.wall_s:.2f} s "
        f"(fair share: {fair:.0%} steal)"
    )
    print(_steal_table(r))
    print(_quality_line(r))
    return 0


def _quality_line(r: object) -> str:
    """``Run.quality`` as one line, with the reasons when it was disturbed."""
    q = getattr(r, "quality", None)
    if q is None:
        return "quality: not measured"
    return q.line() + ("" if not q.disturbed else "\n  " + "\n  ".join(q.reasons))


#: the help text of ``vcpulab sim --help``: what a SPEC.toml holds
SPEC_HELP = """\
A SPEC.toml describes one simulated run, or a sweep when it has a [grid]:

  [config]                  # a vcpulab.sim.Config, field for field
  duration_ns = 20_000_000
  seed = 0
  trace = true              # needed for sched maps
  [config.host]
  pcpus = 8
  [[config.vms]]
  vcpus = 8
  count = 2
  workload = "ebizzy_like"  # a preset of vcpulab.sim.presets, or a table
  policy = "dy_eligible"    # a constructor of vcpulab.sim.policies, or a table

  [grid]                    # optional: dotted paths -> lists of values
  "vms.0.policy" = ["baseline_2011", "dy_eligible"]
  seed = [0, 1, 2]

  [output]                  # optional
  sched_map = true          # a PNG per run with a trace
  us_per_pixel = 10
  start_ns = 5_000_000      # optional: the map's window (default: the whole run)
  end_ns = 8_000_000

Its JSON Schema (for editors and checks): `vcpulab schema`, or
docs/spec.schema.json.
"""


def _named(kind: str, value: object, path: str) -> object:
    """A preset/policy given by name in TOML → its config object."""
    from vcpulab.sim import policies, presets

    if not isinstance(value, str):
        return value
    module = presets if kind == "workload" else policies
    if value not in module.NAMES:
        raise ValueError(f"{path}: unknown {kind} {value!r}; choose one of {', '.join(module.NAMES)} or give a table")
    return module.by_name(value)


#: The [output] keys of a SPEC.toml
SPEC_OUTPUT_KEYS = ("sched_map", "us_per_pixel", "start_ns", "end_ns")


def spec_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a SPEC.toml (as TOML parses it):
    ``[config]`` is the simulator's configuration ([`vcpulab.sim.config_schema`][],
    generated from the Rust structs), where a VM's ``workload`` and ``policy``
    may also name a preset / policy constructor; ``[grid]`` maps dotted config
    paths to non-empty lists; ``[output]`` holds the sched-map options. The
    committed copy is docs/spec.schema.json (``vcpulab schema > docs/spec.schema.json``)."""
    from vcpulab import sim
    from vcpulab.sim import policies, presets

    cfg = sim.config_schema()
    defs = cfg.pop("$defs")
    cfg.pop("$schema", None)
    cfg["title"] = "SimConfig"
    defs["SimConfig"] = cfg
    vm = defs["VmConfig"]["properties"]
    for key, module, what in (
        ("workload", presets, "a preset of vcpulab.sim.presets"),
        ("policy", policies, "a constructor of vcpulab.sim.policies"),
    ):
        table = {k: v for k, v in vm[key].items() if k != "default"}
        vm[key] = {
            "description": vm[key].get("description", ""),
            "anyOf": [table, {"type": "string", "enum": list(module.NAMES), "description": what}],
        }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "vcpulab SPEC.toml",
        "description": "A simulated run (vcpulab sim SPEC.toml), or a sweep when it has a [grid]. "
        "Generated by `vcpulab schema` from the Rust configuration structs; do not edit.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "config": {"$ref": "#/$defs/SimConfig", "description": "A vcpulab.sim.Config, field for field."},
            "grid": {
                "description": 'A sweep: dotted config paths ("vms.0.policy", "seed") -> the values to run.',
                "type": "object",
                "minProperties": 1,
                "propertyNames": {"pattern": "^[a-z_]+(\\.([a-z_]+|[0-9]+))*$"},
                "additionalProperties": {"type": "array", "minItems": 1},
            },
            "output": {
                "description": "Output options.",
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "sched_map": {
                        "type": "boolean",
                        "default": False,
                        "description": "Write a sched-map PNG per run that has a trace.",
                    },
                    "us_per_pixel": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "description": "Sched-map time resolution, us per pixel.",
                    },
                    "start_ns": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Sched-map window start, ns of simulated time (default 0).",
                    },
                    "end_ns": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Sched-map window end, ns of simulated time (default: the run's duration_ns).",
                    },
                },
            },
        },
        "$defs": defs,
    }


def cmd_schema(args: argparse.Namespace) -> int:
    schema = sim_config_schema() if args.config else spec_schema()
    print(json.dumps(schema, indent=2, sort_keys=True))
    return 0


def sim_config_schema() -> dict[str, Any]:
    """The JSON Schema of the simulator's configuration (``vcpulab schema --config``)."""
    from vcpulab import sim

    return sim.config_schema()


def load_spec(path: Path) -> tuple[Config, dict[str, list[object]] | None, dict[str, object]]:
    """Parse a SPEC.toml into (base Config, grid or None, output options)."""
    import tomllib

    from vcpulab import sim

    try:
        spec = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text (UTF-8) file; a SPEC is TOML") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: invalid TOML: {e}") from None
    unknown = set(spec) - {"config", "grid", "output"}
    if unknown:
        raise ValueError(f"{path}: unknown section(s) {sorted(unknown)}; expected [config], [grid], [output]")
    for section in ("config", "grid", "output"):
        if section in spec and not isinstance(spec[section], dict):
            raise ValueError(f"{path}: {section} must be a table ([{section}]), got {spec[section]!r}")
    cfg = dict(spec.get("config", {}))
    vms = []
    vm_list = cfg.get("vms", [{}])
    if not isinstance(vm_list, list):
        raise ValueError(f"{path}: config.vms must be an array of tables ([[config.vms]]), got {vm_list!r}")
    for i, vm in enumerate(vm_list):
        if not isinstance(vm, dict):
            raise ValueError(f"{path}: config.vms[{i}] must be a table, got {vm!r}")
        vm = dict(vm)
        for kind in ("workload", "policy"):
            if kind in vm:
                obj = _named(kind, vm[kind], f"config.vms[{i}].{kind}")
                vm[kind] = obj.to_dict() if hasattr(obj, "to_dict") else obj
        vms.append(vm)
    cfg["vms"] = vms
    try:
        base = sim.Config.from_dict(cfg)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path}: {e}") from None
    grid = spec.get("grid")
    if grid is not None:
        if not isinstance(grid, dict) or not grid:
            raise ValueError(f"{path}: [grid] must map dotted paths to lists of values")
        conv: dict[str, list[object]] = {}
        for k, vals in grid.items():
            if not isinstance(vals, list) or not vals:
                raise ValueError(f"{path}: grid.{k} must be a non-empty list")
            leaf = k.rsplit(".", 1)[-1]
            conv[k] = [_named(leaf, v, f"grid.{k}") if leaf in ("policy", "workload") else v for v in vals]
            try:
                base.with_path(k, conv[k][0])
            except (ValueError, TypeError) as e:
                raise ValueError(f"{path}: grid.{k}: {e}") from None
        grid = conv
    output = dict(spec.get("output", {}))
    bad = set(output) - set(SPEC_OUTPUT_KEYS)
    if bad:
        raise ValueError(f"{path}: unknown [output] key(s) {sorted(bad)}; expected {', '.join(SPEC_OUTPUT_KEYS)}")
    if "sched_map" in output and not isinstance(output["sched_map"], bool):
        raise ValueError(f"{path}: [output] sched_map must be true or false, got {output['sched_map']!r}")
    if "us_per_pixel" in output:
        upp = output["us_per_pixel"]
        if isinstance(upp, bool) or not isinstance(upp, (int, float)) or not (0 < upp <= 1e9):
            raise ValueError(f"{path}: [output] us_per_pixel must be a number of µs in (0, 1e9], got {upp!r}")
    for k in ("start_ns", "end_ns"):
        if k in output and (isinstance(output[k], bool) or not isinstance(output[k], int) or output[k] < 0):
            raise ValueError(f"{path}: [output] {k} must be an int of ns >= 0, got {output[k]!r}")
    if output.get("start_ns", 0) >= output.get("end_ns", 2**63):
        raise ValueError(
            f"{path}: [output] end_ns ({output['end_ns']}) must be after start_ns ({output.get('start_ns', 0)})"
        )
    return base, grid, output


#: The file in --out that lists what the last ``vcpulab sim`` wrote there.
_MANIFEST = ".vcpulab-outputs.json"


class _Outputs:
    """``vcpulab sim``'s outputs, staged: written into a hidden folder inside
    ``--out`` and moved into place (``os.replace``, one file at a time) only
    once the run has succeeded. A failing rerun leaves the earlier outputs as
    they were. An earlier run's outputs that this run does not write again (a
    trace, sched maps) are removed then, and only those the manifest
    (``.vcpulab-outputs.json``) says vcpulab wrote: another tool's file in
    ``--out`` is never deleted. (The points/ checkpoint of a sweep is written
    in place on purpose: a rerun resumes from it.)"""

    def __init__(self, out: Path) -> None:
        import tempfile

        self.out = out
        self.stage = Path(tempfile.mkdtemp(prefix=".vcpulab-staging-", dir=out))

    def path(self, name: str) -> Path:
        return self.stage / name

    def commit(self) -> list[Path]:
        """Move the staged files into ``out``; returns their final paths."""
        new = sorted(p.name for p in self.stage.iterdir())
        man = self.out / _MANIFEST
        try:
            old = set(json.loads(man.read_text()).get("files", []))
        except (OSError, ValueError, AttributeError):
            old = set()
        for name in new:
            os.replace(self.stage / name, self.out / name)
        for name in sorted(old - set(new)):
            if "/" not in name and name != _MANIFEST:
                (self.out / name).unlink(missing_ok=True)
        tmp = self.stage / _MANIFEST
        tmp.write_text(json.dumps({"files": new}))
        os.replace(tmp, man)
        self.stage.rmdir()
        return [self.out / n for n in new]

    def abort(self) -> None:
        import shutil

        shutil.rmtree(self.stage, ignore_errors=True)


def _parquet_meta(extra: dict[str, str] | None = None) -> dict[str, str]:
    from vcpulab.provenance import provenance

    prov = provenance()
    meta = {f"vcpulab.{k}": (json.dumps(v, default=str) if not isinstance(v, str) else v) for k, v in prov.items()}
    meta.update(extra or {})
    return meta


def _closed(fig: Any, path: Path) -> Path:
    """A figure already saved to ``path``, closed: pyplot keeps every open
    figure alive, and the CLI writes many."""
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def cmd_sim(args: argparse.Namespace) -> int:
    base, grid, output = load_spec(Path(args.spec))
    if args.dask and grid is None:
        raise ValueError("--dask runs a sweep: the SPEC needs a [grid] (a single run is local)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    say = _say(args)
    staged = _Outputs(out)
    try:
        doc = _sim_into(staged, base, grid, output, args, say)
    except BaseException:
        staged.abort()
        raise
    files = staged.commit()
    say("wrote:")
    for p in files:
        say(f"  {p}")
    if args.json:
        doc.update(out=str(out), files=[str(p) for p in files])
        print(json.dumps(doc, indent=2, default=str))
    return 0


def _say(args: argparse.Namespace) -> Any:
    """``print``, or print to stderr when ``--json`` keeps stdout for the JSON."""
    if getattr(args, "json", False):
        return lambda *a: print(*a, file=sys.stderr)
    return print


#: a sweep draws the sched maps of its first points, at most this many
_SWEEP_MAPS = 8


def _map_window(cfg: Any, output: dict[str, object], upp: float, what: str) -> tuple[int, int]:
    """The sched map's window of a run (``[output] start_ns`` / ``end_ns``,
    default the whole run), refused before anything runs where it leaves
    the run or is wider than `vcpulab.plot.MAX_MAP_COLUMNS` columns (a
    failure after a long run loses it)."""
    import math

    from vcpulab.plot import MAX_MAP_COLUMNS

    start = int(output.get("start_ns", 0))  # type: ignore[call-overload]  # ints (load_spec checks them)
    end = int(output.get("end_ns", cfg.duration_ns))  # type: ignore[call-overload]
    if end > cfg.duration_ns or start >= end:
        raise ValueError(
            f"[output] start_ns = {start} / end_ns = {end} lie outside {what}, which simulates 0 to "
            f"duration_ns = {cfg.duration_ns}"
        )
    cols = math.ceil((end - start) / (upp * 1000.0))
    if cols > MAX_MAP_COLUMNS:
        need = (end - start) / MAX_MAP_COLUMNS / 1000  # µs a pixel, rounded up to 3 digits
        step = 10 ** (math.floor(math.log10(need)) - 2)
        raise ValueError(
            f"the sched map of {what} ({(end - start) / 1e9:g} s at us_per_pixel = {upp:g}) would be {cols} columns, "
            f"more than {MAX_MAP_COLUMNS}: set [output] us_per_pixel >= {math.ceil(need / step) * step:g}"
            ", a narrower start_ns / end_ns, or sched_map = false"
        )
    return start, end


def _sim_into(
    staged: _Outputs, base: Any, grid: Any, output: dict[str, object], args: argparse.Namespace, say: Any
) -> dict[str, Any]:
    """Runs the SPEC into ``staged``; returns what ``--json`` prints (less the files)."""
    import polars as pl

    from vcpulab import sim
    from vcpulab.plot import sched_map

    out = staged.out
    want_map = bool(output.get("sched_map", base.trace))
    upp = float(output.get("us_per_pixel", 10))  # type: ignore[arg-type]  # a number (load_spec checks it)
    doc: dict[str, Any] = {
        "spec": str(args.spec),
        "kind": "run" if grid is None else "sweep",
        "config_hash": base.config_hash(),
        "seed": base.seed,
    }
    if grid is None:
        if want_map and not base.trace:
            raise ValueError("[output] sched_map needs config.trace = true")
        start_ns, end_ns = _map_window(base, output, upp, "the run") if want_map else (0, None)
        r = sim.run(base)
        meta = _parquet_meta({"vcpulab.config": base.to_json(), "vcpulab.seed": str(base.seed)})
        for name in ("summary", "vms", "vcpus", "pcpus", "trace"):
            df = getattr(r, name)
            if df is not None:
                p = staged.path(f"{name}.parquet")
                df.write_parquet(p, metadata=meta)
        show: list[str] = [
            c
            for c in ("throughput_ops_s", "useful_frac", "spin_frac", "ple_frac", "idle_frac", "ple_exits", "yield_ok")
            if c in r.summary.columns
        ]
        with pl.Config(tbl_cols=len(show)):
            say(r.summary.select(show))
        doc["summary"] = r.summary.row(0, named=True)
        if want_map:
            _closed(
                sched_map(r, staged.path("sched_map.png"), us_per_pixel=upp, start_ns=start_ns, end_ns=end_ns),
                staged.path("sched_map.png"),
            )
        if args.perfetto:
            if r.trace is None:
                raise ValueError("--perfetto needs config.trace = true in the SPEC")
            from vcpulab.export import to_perfetto

            to_perfetto(r, staged.path("trace.perfetto.json"))
    else:
        if args.perfetto:
            raise ValueError("--perfetto writes the trace of a single run; this SPEC has a [grid] (a sweep)")
        from vcpulab.sim._points import grid_json
        from vcpulab.sim.distributed import dask_executor, run_sweep

        if args.dask:
            try:
                import distributed  # noqa: F401
            except ImportError:
                raise ValueError("--dask needs dask.distributed: pip install 'vcpulab[dask]'") from None
        if want_map and base.trace:
            for i, (_, cfg) in enumerate(_grid_points(base, grid)):
                if i >= _SWEEP_MAPS:
                    break
                _map_window(cfg, output, upp, f"point {i}")
        # every point is checkpointed under OUT/points: a rerun resumes where it stopped
        with dask_executor(args.dask) if args.dask else contextlib.nullcontext() as ex:
            df = run_sweep(
                base,
                grid,
                executor=ex,
                out=out / "points",
                threads=args.threads,
                progress=not args.quiet,
                max_points=args.max_points or sim.MAX_SWEEP_POINTS,
            )
        failed = df.filter(pl.col("error").is_not_null())
        if failed.height:
            print(
                f"vcpulab: {failed.height} of {df.height} points failed (see the error column); "
                "rerun the same command to retry them",
                file=sys.stderr,
            )
        p = staged.path("sweep.parquet")
        df.write_parquet(
            p, metadata=_parquet_meta({"vcpulab.base_config": base.to_json(), "vcpulab.grid": grid_json(grid)})
        )
        show = [
            c
            for c in list(grid) + ["throughput_ops_s", "useful_frac", "spin_frac", "ple_frac", "ple_exits", "yield_ok"]
            if c in df.columns
        ]
        with pl.Config(tbl_rows=40, tbl_cols=len(show), fmt_str_lengths=40):
            say(df.select(show))
        doc["grid"] = json.loads(grid_json(grid))
        doc["points"] = df.height
        doc["failed_points"] = failed.height
        keep = [*show, *(c for c in ("error", "config_hash") if c in df.columns and c not in show)]
        doc["rows"] = df.select(keep).to_dicts()
        if want_map and base.trace:
            for i, (params, cfg) in enumerate(_grid_points(base, grid)):
                if i >= _SWEEP_MAPS:
                    break
                r = sim.run(cfg)
                name, title = _point_names(i, params)
                m = staged.path(name)
                start_ns, end_ns = _map_window(cfg, output, upp, f"point {i}")
                _closed(sched_map(r, m, us_per_pixel=upp, start_ns=start_ns, end_ns=end_ns, title=title), m)
    return doc


def _point_names(i: int, params: dict[str, object]) -> tuple[str, str]:
    """The sched map file name and title of sweep point ``i`` with grid values
    ``params``: ``sched_map_1_policy-dy_eligible.png`` and "vms.0.policy =
    dy_eligible" (each key's last part in the name, the whole key in the
    title; the index keeps names unique and in the sweep's order)."""
    import re

    slug = "_".join(f"{k.rsplit('.', 1)[-1]}-{v}" for k, v in params.items())
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", slug).strip("-")[:80]
    title = ", ".join(f"{k} = {v}" for k, v in params.items())
    return f"sched_map_{i}_{slug}.png" if slug else f"sched_map_{i}.png", f"point {i}: {title}"


def _grid_points(base: object, grid: dict[str, list[object]]):  # type: ignore[no-untyped-def]
    import itertools

    from vcpulab.sim._points import param_value

    keys = list(grid)
    for combo in itertools.product(*(grid[k] for k in keys)):
        cfg = base
        for k, v in zip(keys, combo):
            cfg = cfg.with_path(k, v)  # type: ignore[attr-defined]
        yield dict(zip(keys, (param_value(v) for v in combo))), cfg


def cmd_demo(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    written: list[Path] = []
    from vcpulab.kvm import KvmUnavailableError

    try:
        from vcpulab.experiment import MsiPingPong, Spin, run

        print("== real KVM: 4 vCPUs sharing 1 host CPU for 1 s")
        r = run(Spin(), vcpus=4, pcpus=[0], duration_s=1.0, sample_every_s=0.01, warn_quality=False)
        print(_steal_table(r))
        print(_quality_line(r))
        r.samples.write_parquet(out / "kvm_steal_samples.parquet")
        written.append(out / "kvm_steal_samples.parquet")
        print("\n== real KVM: halt polling, host -> vCPU messages 50 us after each halt")
        for poll in (0, 200_000):
            from vcpulab import _core

            cpus = sorted(_core.allowed_cpus())
            pp = run(
                MsiPingPong(rounds=500, gap_us=50),
                vcpus=1,
                pcpus=cpus[-1:],
                duration_s=10,
                halt_poll_ns=poll,
                warn_quality=False,
            )
            res = pp.results.row(0, named=True)
            last = pp.samples.filter(pp.samples["t_ns"] == pp.samples["t_ns"].max()).row(0, named=True)
            print(
                f"  halt_poll_ns={poll:>6}: round trip median {res['rtt_median_us']:.1f} us, "
                f"successful polls {last['halt_successful_poll']} of {last['halt_exits']} halts"
            )
            print("    " + _quality_line(pp).replace("\n", "\n    "))
            if poll and pp.quality.disturbed:
                print(
                    "    (KVM stops polling while another task is runnable on the vCPU's CPU: "
                    "few successful polls here say more about that load than about halt polling)"
                )
    except KvmUnavailableError as e:
        print(f"(skipping the real-KVM part: {e})")
    from vcpulab import sim, validation
    from vcpulab.plot import sched_map

    # the registered cases of [S4], in their era (docs/validation.md): the
    # pictures and numbers are the ones the validation scores, one seed
    gang_case = validation.case("schedmap2012_gang_vs_ple_8x20")
    clean_case = validation.case("schedmap2012_16x10_vs_8x20")
    era = gang_case.era
    print(
        f"\n== simulator: [S4] — 80 host CPUs at 2x overcommit, the {era} era "
        f"(CFS, the era's PLE and directed yield; 100 ms simulated, the first 40 ms warm-up)"
    )

    def build(c: validation.Case, variant: str) -> sim.Config:
        assert c.build is not None
        cfg = c.build(c.ctx(validation.COSTS[c.costs]), variant, 0)
        assert isinstance(cfg, sim.Config)
        return cfg.replace(trace=True)

    runs = (
        ("8x20_ple", "8 VMs x 20 vCPUs, PLE ", build(gang_case, "base")),
        ("16x10_ple", "16 VMs x 10 vCPUs, PLE", build(clean_case, "new")),
        ("8x20_gang", "8 VMs x 20 vCPUs, gang", build(gang_case, "new")),
    )
    tputs: dict[str, float] = {}
    for label, what, cfg in runs:
        sr = sim.run(cfg)
        tput = tputs[label] = sr.summary["throughput_ops_s"][0]
        png = out / f"sched_map_{label}.png"
        fig = sched_map(
            sr,
            png,
            us_per_pixel=5,
            row_px=3,
            start_ns=45_000_000,
            end_ns=50_000_000,
            title=f"{what.strip()} ({era}): {tput:,.0f} ops/s",
        )
        written.append(_closed(fig, png))
        print(
            f"  {what}: {tput:>12,.0f} ops/s ({tput / tputs['8x20_ple']:.2f}x the 8x20 PLE run); "
            f"PLE exits {sr.summary['ple_exits'][0]:,}"
        )
    ratio = tputs["8x20_gang"] / tputs["8x20_ple"]
    within = validation.within_2x(gang_case, ratio)
    print(
        f"  gang / PLE, 8x20: {ratio:.2f}x here; the 2012 measurement ([S4], docs/sources.md): "
        f"{gang_case.published.value:.2f}x — {'within' if within else 'not within'} 2x "
        f"(case {gang_case.name}, {era}; every case's score: docs/validation.md)"
    )

    print(f"\ndone in {time.monotonic() - t0:.1f} s; wrote:")
    for p in written:
        print(f"  {p}")
    return 0


def _attach(pid: int) -> Any:
    """``vcpulab.kvm.attach(pid)``; why it failed as a `_Failed` (status 1)."""
    from vcpulab.kvm import attach

    try:
        return attach(pid)
    except (ProcessLookupError, LookupError, PermissionError) as e:
        raise _Failed(e) from e


def _qemu_guest_name(cmdline: Sequence[str]) -> str | None:
    """The guest name of a QEMU command line: ``-name NAME`` or ``-name
    guest=NAME,...`` (also ``--name``; ``,,`` is QEMU's escaped comma); None
    without one."""
    for i, arg in enumerate(cmdline[:-1]):
        if arg in ("-name", "--name"):
            items = cmdline[i + 1].replace(",,", "\0").split(",")
            for n, item in enumerate(items):
                if item.startswith("guest="):
                    return item[len("guest=") :].replace("\0", ",")
                if n == 0 and "=" not in item:
                    return item.replace("\0", ",")
            return None
    return None


def _kvm_processes() -> list[dict[str, Any]]:
    """The processes (other than this one) that hold a KVM VM
    (``anon_inode:kvm-vm`` among their fds), by pid: pid, comm, cmdline (its
    arguments) and guest (QEMU's ``-name``, or None). Processes whose fds
    cannot be read are left out."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        d = Path(entry.path)
        try:
            fds = os.listdir(d / "fd")
        except OSError:  # gone, or not ours to read
            continue
        holds_vm = False
        for fd in fds:
            try:
                if os.readlink(d / "fd" / fd) == "anon_inode:kvm-vm":
                    holds_vm = True
                    break
            except OSError:
                continue
        if not holds_vm:
            continue
        try:
            comm = (d / "comm").read_text().strip()
            cmdline = [a.decode(errors="replace") for a in (d / "cmdline").read_bytes().split(b"\0")[:-1]]
        except OSError:
            continue
        found.append({"pid": int(entry.name), "comm": comm, "cmdline": cmdline, "guest": _qemu_guest_name(cmdline)})
    return sorted(found, key=lambda p: p["pid"])


def _describe(procs: Sequence[dict[str, Any]]) -> str:
    if not procs:
        return "none"
    return ", ".join(f"{p['pid']} ({p['comm']}" + (f", guest {p['guest']}" if p["guest"] else "") + ")" for p in procs)


def _matches_guest(proc: dict[str, Any], name: str) -> bool:
    """``--guest NAME``: QEMU's guest name, the comm, or the program's file name."""
    argv0 = os.path.basename(proc["cmdline"][0]) if proc["cmdline"] else ""
    return name in (proc["guest"], proc["comm"], argv0)


def _watched_pid(args: argparse.Namespace) -> int:
    """The process ``vcpulab watch`` watches: PID, ``--pid PID``, or the one KVM
    process ``--guest NAME`` matches; else a `_Failed` naming the candidates."""
    pid = args.pid if args.pid is not None else args.pid_option
    if pid is not None:
        return int(pid)
    procs = _kvm_processes()
    if args.guest is None:
        raise _Failed(
            ValueError(f"watch needs a process: PID, --pid PID or --guest NAME (KVM processes: {_describe(procs)})"),
            code=2,
        )
    hits = [p for p in procs if _matches_guest(p, args.guest)]
    if not hits:
        raise _Failed(
            LookupError(
                f"--guest {args.guest!r}: no KVM process has that guest name (QEMU's -name), comm or program "
                f"name (KVM processes: {_describe(procs)})"
            )
        )
    if len(hits) > 1:
        raise _Failed(
            LookupError(
                f"--guest {args.guest!r} matches {len(hits)} KVM processes: {_describe(hits)}; choose one with --pid"
            )
        )
    return int(hits[0]["pid"])


def cmd_watch(args: argparse.Namespace) -> int:
    """A kvm_stat-like live table of another process's vCPU threads, until
    COUNT tables, Ctrl-C, or the process's exit (then one line, status 0)."""
    if args.log and not Path(args.log).parent.is_dir():
        raise ValueError(f"--log: the folder {Path(args.log).parent} does not exist")
    if args.json and args.refresh:
        raise _Failed(ValueError("--refresh redraws a table; --json prints one object per interval"), code=2)
    a = _attach(_watched_pid(args))
    with a:
        return _watch(a, args)


#: what a redraw starts with: cursor home, clear the screen (as kvm_stat's
#: curses screen does)
_CLEAR_SCREEN = "\x1b[H\x1b[2J"


def _redraws(args: argparse.Namespace, isatty: bool) -> bool:
    """Whether ``vcpulab watch`` redraws its table in place: ``--refresh`` /
    ``--no-refresh`` as given; by default when stdout is a terminal and the
    output is the table (not ``--json``)."""
    if args.refresh is not None:
        return bool(args.refresh)
    return isatty and not args.json


def _watch_rates(cur_t: Any, prev_t: Any, cur_v: Any, prev_v: Any, dt: int) -> tuple[Any, int, list[dict[str, Any]]]:
    """One interval's rates: the per-vCPU-thread table (None when no vCPU
    thread is alive), the interval's ns, and the per-VM stat rates."""
    import polars as pl

    tab = None
    j = cur_t.join(prev_t, on=["vm", "vcpu", "tid"], suffix="_0")
    if j.height:
        dt = int((j["t_ns"] - j["t_ns_0"]).max())  # type: ignore[arg-type]
        tab = j.select(
            "vm",
            "vcpu",
            "tid",
            ((pl.col("cpu_ns") - pl.col("cpu_ns_0")) / dt * 100).round(1).alias("cpu_%"),
            ((pl.col("run_delay_ns") - pl.col("run_delay_ns_0")) / dt * 100).round(1).alias("run_delay_%"),
            ((pl.col("voluntary_ctxt_switches") - pl.col("voluntary_ctxt_switches_0")) * 1e9 / dt)
            .round(0)
            .alias("vol_cs_per_s"),
            ((pl.col("nonvoluntary_ctxt_switches") - pl.col("nonvoluntary_ctxt_switches_0")) * 1e9 / dt)
            .round(0)
            .alias("invol_cs_per_s"),
            *[
                ((pl.col(k) - pl.col(k + "_0")) * 1e9 / dt).round(0).alias(f"{k}_per_s")
                for k in ("exits", "halt_exits", "halt_successful_poll")
                if k in j.columns
            ],
        ).sort(["vm", "vcpu"])
    vms: list[dict[str, Any]] = []
    if cur_v.height and prev_v.height:
        keys = [
            k for k in ("exits", "halt_exits", "halt_successful_poll", "halt_wakeup", "io_exits") if k in cur_v.columns
        ]
        for r in cur_v.join(prev_v, on="vm", suffix="_0").iter_rows(named=True) if keys else ():
            vms.append({"vm": r["vm"], **{f"{k}_per_s": round((r[k] - r[k + "_0"]) * 1e9 / dt) for k in keys}})
    return tab, dt, vms


def _watch(a: Any, args: argparse.Namespace) -> int:
    import csv

    import polars as pl

    say = (lambda m: print(m, file=sys.stderr)) if args.json else print
    head = "\n".join(
        [f"watching pid {a.pid} ({a.comm}): {a.vms.height} VM(s), {a.vcpus.height} vCPU(s)"]
        + [f"  note: {n}" for n in a.notes]
    )
    say(head)
    redraw = _redraws(args, sys.stdout.isatty())
    count = 1 if args.once else args.count
    log = open(args.log, "w", newline="") if args.log else None
    writer: Any = None
    frames_t, frames_v = [], []
    prev_t, prev_v = a.sample_once()
    t_first = time.monotonic_ns()
    i = 0
    try:
        while count is None or i < count:
            if a.wait_exited(args.interval_s):  # by its pidfd: ends within the interval after the process
                say(f"-- {time.strftime('%H:%M:%S')}: process {a.pid} ({a.comm}) exited; watch ends")
                break
            cur_t, cur_v = a.sample_once()
            frames_t.append(cur_t)
            frames_v.append(cur_v)
            dt = max((time.monotonic_ns() - t_first) if not i else 1, 1)
            tab, dt, vms = _watch_rates(cur_t, prev_t, cur_v, prev_v, dt)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            if args.json:
                rows = tab.to_dicts() if tab is not None else []
                print(
                    json.dumps({"time": stamp, "pid": a.pid, "interval_ns": dt, "vcpus": rows, "vms": vms}), flush=True
                )
            else:
                if tab is not None:
                    with pl.Config(
                        tbl_rows=64,
                        tbl_cols=-1,
                        tbl_width_chars=250,
                        tbl_hide_dataframe_shape=True,
                        tbl_hide_column_data_types=True,
                    ):
                        lines = [f"-- {time.strftime('%H:%M:%S')}\n{tab.drop('vm') if a.vms.height <= 1 else tab}"]
                    for v in vms:
                        lines.append(
                            f"   VM fd {v['vm']}: " + ", ".join(f"{k} {x:,}/s" for k, x in v.items() if k != "vm")
                        )
                else:
                    lines = [f"-- {time.strftime('%H:%M:%S')}: no vCPU thread alive"]
                if redraw:  # the whole screen again: the header, then this interval
                    print(_CLEAR_SCREEN + head + "\n" + "\n".join(lines), flush=True)
                else:
                    print("\n".join(lines), flush=True)
            if log is not None and tab is not None:
                if writer is None:
                    writer = csv.writer(log)
                    writer.writerow(["time", *tab.columns])
                for r in tab.iter_rows():
                    writer.writerow([stamp, *r])
                log.flush()
            prev_t, prev_v = cur_t, cur_v
            i += 1
    except KeyboardInterrupt:
        pass
    finally:
        if log is not None:
            log.close()
    if args.parquet and frames_t:
        out = Path(args.parquet)
        meta = _parquet_meta({"vcpulab.watch_pid": str(a.pid), "vcpulab.watch_comm": str(a.comm)})
        pl.concat(frames_t).write_parquet(out, metadata=meta)
        say(f"wrote {out}")
        if any(f.height for f in frames_v):
            vm_out = out.with_name(out.stem + "_vm_stats" + out.suffix)
            pl.concat([f for f in frames_v if f.height], how="diagonal_relaxed").write_parquet(vm_out, metadata=meta)
            say(f"wrote {vm_out}")
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    """Traces another process's vCPU threads for a while (docs/tracing.md) and
    prints exits by reason, halts and wake-up latency per vCPU."""
    import polars as pl

    from vcpulab.analysis import exits_by_reason, wakeup_latency

    say = _say(args)
    a = _attach(args.pid)
    say(f"tracing pid {a.pid} ({a.comm}) for {args.duration_s:g} s: {a.vcpus.height} vCPU thread(s)")
    try:
        f = a.trace(duration_s=args.duration_s)
    finally:
        a.close()
    info = f.info
    counts = ", ".join(f"{k} {v}" for k, v in sorted(info["counts"].items()))
    say(f"CPUs {info['cpus']}: {info['events']} events ({counts})" + ("; TRUNCATED" if info["truncated"] else ""))
    with pl.Config(
        tbl_rows=32, tbl_cols=-1, tbl_width_chars=200, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True
    ):
        say(f"exits by reason (from {info['exits_source']}):")
        say(exits_by_reason(f.exits).select("reason", "count", "handling_p50_ns", "handling_p99_ns"))
        h = (
            f.halts.group_by("vcpu")
            .agg(
                pl.len().alias("halts"),
                pl.col("polled").sum().alias("polled"),
                pl.col("ns").median().alias("halt_p50_ns"),
            )
            .sort("vcpu")
        )
        say("halts:")
        say(h)
        say("wake-up to run:")
        say(wakeup_latency(f.wakeups).select("vcpu", "tid", "count", "latency_p50_ns", "latency_p99_ns"))
    files: list[str] = []
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("trace", "wakeups", "exits", "halts"):
            getattr(f, name).write_parquet(out / f"{name}.parquet")
            files.append(str(out / f"{name}.parquet"))
        say(f"wrote {out}/{{trace,wakeups,exits,halts}}.parquet")
    if args.perfetto:
        from vcpulab.export import to_perfetto

        pf = to_perfetto(f, args.perfetto)
        files.append(str(pf))
        say(f"wrote {pf} (open it in https://ui.perfetto.dev)")
    if args.json:
        keys = ("cpus", "events", "lost", "dropped", "malformed", "truncated", "exits_source", "complete_until_ns")
        doc = {
            "pid": a.pid,
            "comm": a.comm,
            "vcpu_threads": a.vcpus.height,
            "duration_s": args.duration_s,
            "window_ns": info.get("window_ns"),
            **{k: info.get(k) for k in keys},
            "counts": info["counts"],
            "rows": {name: getattr(f, name).height for name in ("trace", "wakeups", "exits", "halts")},
            "files": files,
        }
        print(json.dumps(doc, indent=2, default=str))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``vcpulab`` command's argument parser (every command and flag)."""
    p = _Parser(
        prog="vcpulab",
        description="Research workbench for overcommitted virtual CPUs.",
        epilog='With --json (info, kvm steal, sim, trace, watch) a failure prints {"error": {"type": ..., '
        '"message": ...}} on stdout with the usual exit status; usage errors (status 2) stay text on stderr.',
    )
    p.add_argument(
        "--version",
        action=_VersionAction,
        help="the version, its build (git commit) and the Python/NumPy/polars it runs with",
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    info = sub.add_parser("info", help="KVM capabilities and module parameters of this host")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.add_argument("--device", type=_nonempty, default="/dev/kvm", help="the KVM device node (default /dev/kvm)")
    info.set_defaults(func=cmd_info)
    kvm = sub.add_parser("kvm", help="experiments on the real /dev/kvm")
    ksub = kvm.add_subparsers(dest="kvm_command", required=True, parser_class=_Parser)
    steal = ksub.add_parser("steal", help="a real overcommit run printing steal time per vCPU")
    steal.add_argument("--vcpus", type=_positive_int, default=4, help="vCPUs (each on its own thread; default 4)")
    steal.add_argument(
        "--pcpus",
        type=parse_cpu_list,
        default=None,
        metavar="CPULIST",
        help="host CPU ids they share, as pcpus= in Python: 1 (CPU 1), 0,2 or 0-3 (default: the first CPU "
        "this process may use)",
    )
    steal.add_argument(
        "--duration-s",
        "--seconds",
        dest="duration_s",
        type=_positive_float,
        default=2.0,
        help="duration in s (default 2; --seconds is its former name)",
    )
    steal.add_argument("--json", action="store_true", help="machine-readable output")
    steal.set_defaults(func=cmd_kvm_steal)
    simp = sub.add_parser(
        "sim",
        help="a simulated run or sweep described in TOML",
        description=SPEC_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    simp.add_argument("spec", help="the SPEC.toml")
    simp.add_argument(
        "--out",
        default="vcpulab-sim-out",
        help="output folder (default ./vcpulab-sim-out); an earlier run's outputs there are removed first; "
        "a sweep checkpoints each point under OUT/points and a rerun computes only the missing ones",
    )
    simp.add_argument(
        "--threads",
        type=_threads,
        default=None,
        help="sweep worker threads (default: all cores; at most vcpulab.sim.MAX_THREADS)",
    )
    simp.add_argument("--dask", metavar="SCHEDULER_ADDRESS", default=None, help="run the sweep on a Dask cluster")
    simp.add_argument("--quiet", action="store_true", help="no progress bar")
    simp.add_argument(
        "--json",
        action="store_true",
        help="one JSON object on stdout: spec, kind (run or sweep), config_hash, seed, the run's summary row "
        "(or the sweep's grid, points, failed_points and rows), out and the files written; the tables go to stderr",
    )
    simp.add_argument(
        "--perfetto",
        action="store_true",
        help="also write the run's trace as OUT/trace.perfetto.json (Chrome trace-event JSON: open it in "
        "https://ui.perfetto.dev); needs config.trace = true and a single run",
    )
    simp.add_argument(
        "--max-points",
        type=_positive_int,
        default=None,
        metavar="N",
        help="refuse a [grid] of more than N points (default: vcpulab.sim.MAX_SWEEP_POINTS, 100000)",
    )
    simp.set_defaults(func=cmd_sim)
    watch = sub.add_parser("watch", help="a live per-vCPU table of another process's KVM VMs (QEMU, vcpulab, ...)")
    which = watch.add_mutually_exclusive_group()
    which.add_argument(
        "pid", type=_positive_int, nargs="?", default=None, help="the VMM process (or --pid PID, or --guest NAME)"
    )
    which.add_argument(
        "--pid",
        dest="pid_option",
        type=_positive_int,
        default=None,
        metavar="PID",
        help="the VMM process (kvm_stat -p)",
    )
    which.add_argument(
        "--guest",
        type=_nonempty_name,
        default=None,
        metavar="NAME",
        help="the one KVM process whose guest name (QEMU's -name NAME or -name guest=NAME), comm or program name "
        "is NAME (kvm_stat -g); none or several is an error naming the candidates",
    )
    watch.add_argument(
        "--interval-s",
        "--interval",
        dest="interval_s",
        type=_at_most(86_400.0, "s"),
        default=1.0,
        help="seconds between rows (default 1, at most 86400; --interval is its former name)",
    )
    once_or_count = watch.add_mutually_exclusive_group()
    once_or_count.add_argument(
        "--count",
        type=_positive_int,
        default=None,
        help="stop after COUNT tables (default: until Ctrl-C or the process exits)",
    )
    once_or_count.add_argument(
        "--once", action="store_true", help="one table after one interval, then exit (kvm_stat -1; --count 1)"
    )
    watch.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per interval on stdout (time, pid, interval_ns, per-vCPU rows, per-VM rates); "
        "the other lines go to stderr",
    )
    watch.add_argument(
        "--refresh",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="redraw the table in place (clear the screen, as kvm_stat does) or, --no-refresh, print one table "
        "after another (default: redraw when stdout is a terminal and --json is not given)",
    )
    watch.add_argument(
        "--log", default=None, metavar="FILE", help="also write every interval's per-vCPU rows to FILE as CSV"
    )
    watch.add_argument(
        "--parquet",
        default=None,
        help="write the per-thread samples there (VM stats beside it), with provenance in the file's metadata",
    )
    watch.set_defaults(func=cmd_watch)
    schema = sub.add_parser("schema", help="the JSON Schema of a SPEC.toml (docs/spec.schema.json)")
    schema.add_argument(
        "--config",
        action="store_true",
        help="the simulator configuration's schema instead (vcpulab.sim.config_schema())",
    )
    schema.set_defaults(func=cmd_schema)
    trace = sub.add_parser("trace", help="trace another process's vCPU threads: exits, halts, wake-up latency")
    trace.add_argument("pid", type=_positive_int, help="the VMM process")
    trace.add_argument("--duration-s", type=_positive_float, default=1.0, help="how long to trace, s (default 1)")
    trace.add_argument("--out", default=None, help="write trace, wakeups, exits, halts as Parquet into this folder")
    trace.add_argument(
        "--json",
        action="store_true",
        help="one JSON object on stdout: pid, comm, vcpu_threads, duration_s, window_ns, cpus, events, lost, "
        "dropped, malformed, truncated, exits_source, complete_until_ns, counts per tracepoint, rows per frame "
        "and the files written; the tables go to stderr",
    )
    trace.add_argument(
        "--perfetto",
        default=None,
        metavar="FILE",
        help="write the trace as Chrome trace-event JSON there (vCPUs as threads of their VM, host CPUs as "
        "tracks; open it in https://ui.perfetto.dev)",
    )
    trace.set_defaults(func=cmd_trace)
    demo = sub.add_parser("demo", help="a short showcase of real KVM and the simulator")
    demo.add_argument("--out", default="vcpulab-demo", help="output folder (default ./vcpulab-demo)")
    demo.set_defaults(func=cmd_demo)
    return p


def _stdout_closed() -> int:
    # the reader went away (`vcpulab info | head -1`): stop quietly, and keep
    # the interpreter's final flush from raising again
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 141  # 128 + SIGPIPE, as a shell reports a command killed by it


def _report(args: argparse.Namespace, error: BaseException, code: int, line: str) -> int:
    """A failed command: ``line`` on stderr and, under ``--json``, one object
    ``{"error": {"type": ..., "message": ...}}`` on stdout; returns ``code``."""
    if getattr(args, "json", False):
        with contextlib.suppress(OSError):
            print(json.dumps({"error": {"type": type(error).__name__, "message": str(error)}}), flush=True)
    print(line, file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``vcpulab`` command with ``argv`` (default: ``sys.argv[1:]``) and
    returns its exit status: 0, 1 when the run failed (one line on stderr), 2
    for bad arguments, 130 when interrupted, 141 when stdout was closed early.
    With ``--json``, a failure also prints ``{"error": {"type": <exception
    class>, "message": <its message>}}`` on stdout (same status); argparse's
    usage errors (status 2) stay plain text on stderr."""
    args = build_parser().parse_args(argv)
    try:
        rc = int(args.func(args))
        sys.stdout.flush()
        return rc
    except KeyboardInterrupt as e:
        return _report(args, e, 130, "interrupted")
    except BrokenPipeError:
        return _stdout_closed()
    except _Failed as f:
        return _report(args, f.error, f.code, f.line)
    except (ValueError, OSError) as e:
        return _report(args, e, 1, f"vcpulab: error: {e}")
    except Exception as e:  # one line, not a traceback (VCPULAB_TRACEBACK=1 shows it)
        from vcpulab import VcpulabError

        if os.environ.get("VCPULAB_TRACEBACK"):
            raise
        if isinstance(e, VcpulabError):
            return _report(args, e, 1, f"vcpulab: error: {type(e).__name__}: {e}")
        return _report(args, e, 1, f"vcpulab: error: {type(e).__name__}: {e} (VCPULAB_TRACEBACK=1 shows where)")


if __name__ == "__main__":
    raise SystemExit(main())
