"""Helpers shared by the tests.

Tests that touch /dev/kvm use the ``kvm_host`` fixture of vcpulab's pytest
plugin, which marks them ``kvm``; they skip, with the exact reason, only where
/dev/kvm is unusable; on the project's machines they must run.
"""

from __future__ import annotations

import os
import threading

# The `kvm_host` fixture, the `kvm`/`slow` markers and the closing count of
# real-KVM tests come from vcpulab's pytest plugin (vcpulab/pytest_plugin.py,
# registered through the pytest11 entry point).


# ----------------------------------------------------------------------------- helpers


def schedstat(tid: int) -> tuple[int, int, int]:
    """(cpu time ns, run delay ns, timeslices) of a thread of this process."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        cpu, delay, slices = f.read().split()
    return int(cpu), int(delay), int(slices)


class PinnedThread(threading.Thread):
    """Runs ``fn()`` on its own OS thread pinned to ``cpus``; keeps its result or exception."""

    def __init__(self, fn, cpus: set[int], meter=None) -> None:  # type: ignore[no-untyped-def]
        """``meter``: a ``vcpulab.quality.measure_cpus`` that counts this
        thread as the measurement's own (its CPU time is not "other tasks")."""
        super().__init__(daemon=True)
        self.fn, self.cpus, self.meter = fn, cpus, meter
        self.result = None
        self.error: BaseException | None = None
        self.tid = 0

    def run(self) -> None:
        os.sched_setaffinity(0, self.cpus)
        self.tid = threading.get_native_id()
        if self.meter is not None:
            self.meter.add_thread(self.tid, sorted(self.cpus))
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            if self.meter is not None:
                self.meter.end_thread(self.tid)

    def value(self, timeout: float = 30.0):  # type: ignore[no-untyped-def]
        self.join(timeout)
        assert not self.is_alive(), "vCPU thread did not finish"
        if self.error is not None:
            raise self.error
        return self.result


def interrupt_script(code: str, after_s: float = 0.3, within_s: float = 1.0) -> str:
    """Runs ``code`` in a fresh interpreter; once it prints "ready", waits
    ``after_s``, sends SIGINT, and asserts the process finished within
    ``within_s`` with status 0. Returns what it printed after "ready"."""
    import signal
    import subprocess
    import sys
    import time

    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        time.sleep(after_s)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=10)
        assert time.monotonic() - t0 < within_s, f"took {time.monotonic() - t0:.2f} s to stop"
        assert p.returncode == 0, out
        return out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
