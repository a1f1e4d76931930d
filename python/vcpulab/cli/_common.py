"""What every ``vcpulab`` command shares: the parser class, the argument types, the failure that carries an exit status, and the CPU-list syntax."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, NoReturn


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


def _quality_line(r: object) -> str:
    """``Run.quality`` as one line, with the reasons when it was disturbed."""
    q = getattr(r, "quality", None)
    if q is None:
        return "quality: not measured"
    return q.line() + ("" if not q.disturbed else "\n  " + "\n  ".join(q.reasons))


def _say(args: argparse.Namespace) -> Any:
    """``print``, or print to stderr when ``--json`` keeps stdout for the JSON."""
    if getattr(args, "json", False):
        return lambda *a: print(*a, file=sys.stderr)
    return print
