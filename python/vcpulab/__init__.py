"""vcpulab: a research workbench for overcommitted virtual CPUs.

Two halves behind one Python API:

* [`vcpulab.kvm`][] drives the real ``/dev/kvm`` of this host (VMs, vCPUs,
  guest RAM as numpy, steal time, binary stats, halt polling);
* [`vcpulab.sim`][] simulates the same world at any scale (host scheduler,
  pause-loop exits, directed-yield policies, pv hints, halt polling).

Submodules load on first use: ``import vcpulab`` then ``vcpulab.sim.run(...)``
works, and importing vcpulab alone loads neither matplotlib nor the simulator.

Conventions, followed by every module (docs/conventions.md): quantities name
their unit (``_s``, ``_us``, ``_ns``) in arguments, columns and CLI flags; key
columns (``vm``, ``vcpu``, ``pcpu``) are ``Int64`` in every frame; host CPUs
are given as a list of CPU ids (``pcpus=[0, 1]`` in Python, ``--pcpus 0,1``
on the command line); a policy is labelled with its constructor's name.

Exceptions: every error vcpulab raises on purpose is a built-in
``ValueError`` / ``IndexError`` / ``TimeoutError`` for bad arguments, ranges
and deadlines, or a subclass of [`VcpulabError`][vcpulab.VcpulabError] for the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

# The Rust core's numpy bindings read numpy's C API when _core loads: without
# numpy that would be a Rust panic (pyo3's PanicException); imported first, a
# missing numpy is a plain ModuleNotFoundError naming it.
import numpy as _numpy  # noqa: F401

from vcpulab._core import (
    GuestAssertionError,
    KvmIoctlError,
    KvmUnavailableError,
    TraceUnavailableError,
    UnexpectedExitError,
    UnsupportedError,
    VcpulabError,
    __version__,
)

__all__ = [
    "GuestAssertionError",
    "KvmIoctlError",
    "KvmUnavailableError",
    "TraceUnavailableError",
    "UnexpectedExitError",
    "UnsupportedError",
    "VcpulabError",
    "__version__",
    "analysis",
    "calibrate",
    "experiment",
    "export",
    "kvm",
    "plot",
    "provenance",
    "sim",
    "testing",
    "tracing",
]

#: Submodules reachable as attributes of the package (imported on first use).
_SUBMODULES = frozenset(
    {"analysis", "calibrate", "cli", "experiment", "export", "kvm", "plot", "provenance", "sim", "testing", "tracing"}
)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"vcpulab.{name}")
    raise AttributeError(f"module 'vcpulab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SUBMODULES)
