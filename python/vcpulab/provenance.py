"""Where a result came from: one place for the provenance vcpulab records.

Every real run ([`vcpulab.experiment.Run.config`][]), simulated result
([`vcpulab.sim.Result.provenance`][]) and Parquet file the CLI writes
carries the same record:

* ``vcpulab_version``: the package version plus the build, e.g.
  ``0.1.0+g1a2b3c4d5e6f`` (the git commit the extension was built from,
  ``.dirty`` when the tree had uncommitted changes; ``+unknown`` when it was
  built outside a git checkout);
* ``dependencies``: versions of Python, NumPy, polars, matplotlib, SciPy
  (those installed; ``None`` when absent);
* ``timestamp_utc``: when the record was made (ISO 8601, UTC);
* ``command_line``: ``sys.argv`` of the process (a notebook kernel's shows
  the kernel's);
* the machine: CPU model, kernel release, KVM module parameters (read now:
  they can change at run time), virtualization, usable host CPUs.

This module imports neither the simulator nor the experiment layer, so any
of them can use it without an import cycle.
"""

from __future__ import annotations

import datetime as _dt
import functools
import sys
from importlib import metadata
from typing import Any

from vcpulab import _core

__all__ = ["BUILD_ID", "dependency_versions", "machine", "provenance", "version"]

#: The git commit the extension was built from (12 hex digits, ``.dirty``
#: appended when the tree had uncommitted changes), or ``"unknown"``.
BUILD_ID: str = getattr(_core, "__build__", "unknown")

#: Distributions whose versions a record names.
_DEPENDENCIES = ("numpy", "polars", "matplotlib", "scipy")


def version() -> str:
    """The package version with the build as a PEP 440 local label:
    ``0.1.0+g<commit>`` (``.dirty`` appended for an uncommitted tree) or
    ``0.1.0+unknown``."""
    build = BUILD_ID if BUILD_ID == "unknown" else f"g{BUILD_ID}"
    return f"{_core.__version__}+{build}"


@functools.lru_cache(maxsize=1)
def dependency_versions() -> dict[str, str | None]:
    """Python and the installed versions of vcpulab's numeric dependencies."""
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in _DEPENDENCIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


@functools.lru_cache(maxsize=1)
def _static_machine() -> tuple[str, str, str, int]:
    import platform

    from vcpulab.kvm import virtualization

    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "unknown")
    except OSError:
        pass
    return model, platform.release(), virtualization(), len(_core.allowed_cpus())


def machine() -> dict[str, Any]:
    """The machine part of provenance: CPU model, kernel release, KVM module
    parameters (read now: they can change at run time), virtualization and
    the number of host CPUs this process may use."""
    from vcpulab.kvm import module_params

    model, kernel, virt, cpus = _static_machine()
    return {
        "host_cpu_model": model,
        "kernel_release": kernel,
        "kvm_module_params": module_params(),
        "virtualization": virt,
        "host_cpus": cpus,
    }


def provenance() -> dict[str, Any]:
    """The full record: version with build, dependency versions, UTC
    timestamp, command line and [`machine`][vcpulab.provenance.machine]."""
    return {
        "vcpulab_version": version(),
        "dependencies": dependency_versions(),
        "timestamp_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command_line": list(sys.argv),
        **machine(),
    }
