"""vcpulab: a research workbench for overcommitted virtual CPUs.

Two halves behind one Python API:

* :mod:`vcpulab.kvm` drives the real ``/dev/kvm`` of this host (VMs, vCPUs,
  guest RAM as numpy, steal time, binary stats, halt polling);
* :mod:`vcpulab.sim` simulates the same world at any scale (host scheduler,
  pause-loop exits, directed-yield policies, pv hints, halt polling).

Exceptions: every error vcpulab raises on purpose is a built-in
``ValueError`` / ``IndexError`` / ``TimeoutError`` for bad arguments, ranges
and deadlines, or a subclass of :class:`VcpulabError` for the rest.
"""

from vcpulab._core import (
    GuestAssertionError,
    KvmIoctlError,
    KvmUnavailableError,
    UnexpectedExitError,
    UnsupportedError,
    VcpulabError,
    __version__,
)

__all__ = [
    "GuestAssertionError",
    "KvmIoctlError",
    "KvmUnavailableError",
    "UnexpectedExitError",
    "UnsupportedError",
    "VcpulabError",
    "__version__",
]
