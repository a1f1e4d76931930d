"""Docstring examples are tests: every ``>>>`` example in vcpulab's public
modules runs here and must print what it shows (doctest), so an example a
user copies from the API reference works."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import vcpulab

#: modules (and their submodules) whose examples need /dev/kvm (run only where it is usable)
_NEEDS_KVM = ("vcpulab.kvm", "vcpulab.experiment")


def _modules() -> list[str]:
    out = ["vcpulab"]
    for m in pkgutil.walk_packages(vcpulab.__path__, "vcpulab."):
        if m.name.endswith("__main__") or m.name == "vcpulab._core":
            continue
        out.append(m.name)
    return sorted(out)


def test_the_package_has_examples_and_every_one_runs() -> None:
    from vcpulab.kvm import kvm_available

    ok, why = kvm_available()
    ran, failed, where = 0, 0, []
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for name in _modules():
        if not ok and any(name == m or name.startswith(m + ".") for m in _NEEDS_KVM):
            continue
        mod = importlib.import_module(name)
        for t in finder.find(mod, name):
            if t.examples and t.name.startswith(name):
                r = runner.run(t, clear_globs=True)
                ran += r.attempted
                if r.failed:
                    failed += r.failed
                    where.append(t.name)
    assert failed == 0, f"failing docstring examples in {where}"
    if ran < 5:
        pytest.fail(f"only {ran} docstring examples ran; the reference's examples are gone?")
