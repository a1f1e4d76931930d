"""Shared fixtures: the real-KVM host, and a count of the real-KVM tests that ran.

Tests that touch /dev/kvm are marked ``kvm`` (automatically, by using the
``kvm_host`` fixture). They skip, with the exact reason, only where /dev/kvm is
unusable; on the project's machines they must run.
"""

from __future__ import annotations

import os
import threading
from collections import Counter

import pytest

from vcpulab.kvm import Host, kvm_available

_KVM_OK, _KVM_WHY = kvm_available()
_kvm_outcomes: Counter[str] = Counter()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "kvm_host" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kvm)


@pytest.fixture(scope="session")
def kvm_host() -> Host:
    """The host's /dev/kvm; skips with the exact reason where it is unusable."""
    if not _KVM_OK:
        pytest.skip(f"/dev/kvm unusable: {_KVM_WHY}")
    return Host()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "kvm" not in report.keywords:
        return
    if report.when == "call":
        _kvm_outcomes[report.outcome] += 1
    elif report.when == "setup" and report.outcome != "passed":
        _kvm_outcomes[report.outcome] += 1


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    ran = _kvm_outcomes["passed"] + _kvm_outcomes["failed"]
    terminalreporter.write_sep(
        "-",
        f"real-KVM tests: {ran} ran ({_kvm_outcomes['passed']} passed, {_kvm_outcomes['failed']} failed), "
        f"{_kvm_outcomes['skipped']} skipped" + ("" if _KVM_OK else f" — /dev/kvm unusable: {_KVM_WHY}"),
    )


# ----------------------------------------------------------------------------- helpers


def schedstat(tid: int) -> tuple[int, int, int]:
    """(cpu time ns, run delay ns, timeslices) of a thread of this process."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        cpu, delay, slices = f.read().split()
    return int(cpu), int(delay), int(slices)


class PinnedThread(threading.Thread):
    """Runs ``fn()`` on its own OS thread pinned to ``cpus``; keeps its result or exception."""

    def __init__(self, fn, cpus: set[int]) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.fn, self.cpus = fn, cpus
        self.result = None
        self.error: BaseException | None = None
        self.tid = 0

    def run(self) -> None:
        os.sched_setaffinity(0, self.cpus)
        self.tid = threading.get_native_id()
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def value(self, timeout: float = 30.0):  # type: ignore[no-untyped-def]
        self.join(timeout)
        assert not self.is_alive(), "vCPU thread did not finish"
        if self.error is not None:
            raise self.error
        return self.result
