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

Bad arguments (a SPEC that does not load included) give one clear line on
stderr and exit status 2; a failure of
the run itself exits with 1 (one line, no traceback; ``VCPULAB_TRACEBACK=1``
shows it). With ``--json``, a failure also prints one object on stdout,
``{"error": {"type": "<exception class>", "message": "..."}}``, with the
same exit status and stderr line (``vcpulab watch 999999999 --json``:
``{"error": {"type": "ProcessLookupError", "message": "no process
999999999"}}``, status 1). Usage errors that argparse finds (an unknown flag,
a malformed value, a missing argument) stay plain text on stderr, status 2,
with or without ``--json``. Output closed early (``| head``) ends the command
quietly.

One room per command (``_kvm``: info and kvm steal; ``_spec``: the SPEC.toml,
its schema and loader; ``_sim``: sim; ``_demo``: demo; ``_watch``: watch and
trace), on ``_common`` (the parser class, argument types, ``_Failed``);
this module builds the parser and runs ``main``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence

from vcpulab._interrupt import sigint_to_python
from vcpulab.cli._common import MAX_CPU_ID as MAX_CPU_ID
from vcpulab.cli._common import (
    _at_most,
    _Failed,
    _nonempty,
    _nonempty_name,
    _Parser,
    _positive_float,
    _positive_int,
    _threads,
    parse_cpu_list,
)
from vcpulab.cli._demo import cmd_demo
from vcpulab.cli._kvm import cmd_info, cmd_kvm_steal
from vcpulab.cli._sim import cmd_sim
from vcpulab.cli._spec import SPEC_HELP, cmd_schema
from vcpulab.cli._spec import SPEC_OUTPUT_KEYS as SPEC_OUTPUT_KEYS
from vcpulab.cli._spec import load_spec as load_spec
from vcpulab.cli._spec import sim_config_schema as sim_config_schema
from vcpulab.cli._spec import spec_schema as spec_schema
from vcpulab.cli._watch import cmd_trace, cmd_watch

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
        sigint_to_python()  # one Ctrl-C, one KeyboardInterrupt, even inside a polars query
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
