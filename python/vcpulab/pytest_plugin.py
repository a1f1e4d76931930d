"""vcpulab's pytest plugin (registered through the ``pytest11`` entry point).

* fixture ``kvm_host``: the host's ``/dev/kvm`` as a [`vcpulab.kvm.Host`][];
  a test using it skips with the exact reason where ``/dev/kvm`` is unusable,
  and is marked ``kvm`` automatically;
* fixture ``twin_calibration``: a [`vcpulab.twins.Calibration`][] for
  simulating twins without /dev/kvm: the file ``$VCPULAB_CALIBRATION`` names
  (one [`Calibration.save`][vcpulab.twins.Calibration.save] wrote), else the
  project machine's ([`vcpulab.twins.reference_calibration`][]);
* markers ``kvm`` (runs against real KVM) and ``slow`` (a longer experiment):
  deselect with ``-m "not kvm"`` or ``-m "not slow"``;
* a closing line counting the real-KVM tests that ran, and how many
  measurements each [`vcpulab.testing.remeasure`][] call made (appended as
  JSON to the file ``$VCPULAB_REMEASURE_LOG`` names, when set);
* assertion helpers for experiment frames live in [`vcpulab.testing`][].
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

__all__ = [
    "kvm_host",
    "twin_calibration",
]

_outcomes: Counter[str] = Counter()
_state: dict[str, Any] = {}


def _availability() -> tuple[bool, str]:
    if "ok" not in _state:
        from vcpulab.kvm import kvm_available

        _state["ok"], _state["why"] = kvm_available()
    return _state["ok"], _state["why"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kvm: runs against the real /dev/kvm of this host")
    config.addinivalue_line("markers", "slow: a longer experiment (seconds)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "kvm_host" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kvm)


@pytest.fixture(scope="session")
def kvm_host() -> Any:
    """The host's /dev/kvm; skips with the exact reason where it is unusable."""
    ok, why = _availability()
    if not ok:
        pytest.skip(f"/dev/kvm unusable: {why}")
    from vcpulab.kvm import Host

    return Host()


@pytest.fixture(scope="session")
def twin_calibration() -> Any:
    """A calibration to simulate twins with, no /dev/kvm needed: the file
    ``$VCPULAB_CALIBRATION`` names, else the reference one vcpulab ships."""
    from vcpulab import twins

    path = os.environ.get("VCPULAB_CALIBRATION")
    return twins.Calibration.load(path) if path else twins.reference_calibration()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "kvm" not in report.keywords:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcomes[report.outcome] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from vcpulab.testing import REMEASURES

    if REMEASURES:
        terminalreporter.write_sep(
            "-", "real-KVM measurements per test (vcpulab.testing.remeasure; -N: all N disturbed, skipped)"
        )
        for name, counts in sorted(REMEASURES.items()):
            terminalreporter.write_line(f"{name}: {counts}")
        path = os.environ.get("VCPULAB_REMEASURE_LOG")
        if path:
            import json

            with open(path, "a") as f:
                f.write(json.dumps(REMEASURES) + "\n")
    if not sum(_outcomes.values()):
        return
    ok, why = _availability()
    ran = _outcomes["passed"] + _outcomes["failed"]
    terminalreporter.write_sep(
        "-",
        f"real-KVM tests: {ran} ran ({_outcomes['passed']} passed, {_outcomes['failed']} failed), "
        f"{_outcomes['skipped']} skipped" + ("" if ok else f" — /dev/kvm unusable: {why}"),
    )
