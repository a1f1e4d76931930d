"""What vcpulab mounts on the host, and how it says so (docs/tracing.md, "Host state").

vcpulab mounts two kernel pseudo filesystems, only where they are missing and
only when it runs as root, each at its standard path:

* debugfs at ``/sys/kernel/debug``: KVM's per-VM folders for
  [`vcpulab.kvm.attach`][] and ``vcpulab watch``, the scheduler's knobs for
  [`vcpulab.twins.host_knobs`][];
* tracefs at ``/sys/kernel/tracing``: the tracepoint formats of traced runs
  (``run(..., trace=True)``, ``attach(pid).trace``, ``vcpulab trace``).

The mount is made by the ``mount(2)`` system call in Rust
(``src/kvm/mounts.rs``, ``_core.mount_pseudo_fs``), with nosuid, nodev, noexec
and relatime as systemd mounts them, never by running a ``mount`` program
found through ``PATH``. It stays mounted after vcpulab exits, as a mount made
by hand would: unmounting it again could pull it from under another user who
started using it meanwhile. The first mount of each filesystem in a process is
said once, as a WARNING of the ``vcpulab`` logger::

    vcpulab mounted debugfs at /sys/kernel/debug (it stays mounted after vcpulab exits; `umount /sys/kernel/debug` removes it)
"""

from __future__ import annotations

import logging
import threading
from typing import Literal

__all__ = ["announce", "ensure_mounted"]

log = logging.getLogger("vcpulab")
_lock = threading.Lock()
_announced: set[str] = set()


def announce() -> None:
    """Logs, once per process and filesystem, each pseudo filesystem this
    process has mounted (also those mounted inside Rust, e.g. tracefs by a
    ``Tracer``)."""
    from vcpulab import _core

    with _lock:
        for name, path in _core.mounted_pseudo_fs():
            if name not in _announced:
                _announced.add(name)
                log.warning(
                    f"vcpulab mounted {name} at {path} (it stays mounted after vcpulab exits; "
                    f"`umount {path}` removes it)"
                )


def ensure_mounted(kind: Literal["debugfs", "tracefs"]) -> bool:
    """Mounts ``kind`` at its standard path unless it is mounted there (module
    docstring). Returns True when this call mounted it (and says so once).
    Raises ``ValueError`` for another name, ``OSError`` (``PermissionError``
    when not root) when it is missing and cannot be mounted."""
    from vcpulab import _core

    try:
        return _core.mount_pseudo_fs(kind)
    finally:
        announce()
