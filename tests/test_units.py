"""Every quantity names its unit (docs/conventions.md): the renamed
arguments take their old names with a DeprecationWarning that points at the
caller, and refuse old and new together."""

from __future__ import annotations

import warnings

import pytest

from vcpulab import experiment
from vcpulab._checks import renamed
from vcpulab.experiment import Spin, run
from vcpulab.kvm import Host


def test_run_takes_the_old_names_with_a_warning_at_the_callers_line() -> None:
    # a bad value, so nothing is created: the old name reaches the new argument, which names itself
    with pytest.warns(DeprecationWarning, match=r"run\(duration=...\) is deprecated; use duration_s=") as rec:
        with pytest.raises(ValueError, match="duration_s"):
            run(Spin(), vcpus=1, duration=-1.0)  # type: ignore[call-overload]
    assert rec[0].filename == __file__
    for old, new in (("sample_every", "sample_every_s"), ("poll_every", "poll_every_s")):
        with pytest.warns(DeprecationWarning, match=f"use {new}="), pytest.raises(ValueError, match=new):
            run(Spin(), vcpus=1, **{old: -1.0})


def test_old_and_new_name_together_raise_type_error() -> None:
    with pytest.raises(TypeError, match="duration= and duration_s="):
        run(Spin(), vcpus=1, duration=1.0, duration_s=1.0)  # type: ignore[call-overload]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names do not warn
        with pytest.raises(ValueError, match="duration_s"):
            run(Spin(), vcpus=1, duration_s=0.0)


def test_renamed_keeps_positional_calls_and_the_signature() -> None:
    @renamed(gap="gap_us")
    def f(x: int, gap_us: float = 1.0) -> float:
        return x * gap_us

    assert f(2, 3.0) == 6.0 and f(2, gap_us=4.0) == 8.0
    with pytest.warns(DeprecationWarning, match=r"f\(gap=...\)"):
        assert f(2, gap=5.0) == 10.0
    assert f.__name__ == "f" and experiment.run.__doc__ and "duration_s" in experiment.run.__doc__


def test_vcpu_timeout_is_timeout_s(kvm_host: Host) -> None:
    with kvm_host.create_vm(4) as vm:
        v = vm.create_vcpu(0)
        with (
            pytest.warns(DeprecationWarning, match="use timeout_s=") as rec,
            pytest.raises(ValueError, match="timeout_s"),
        ):
            v.run(timeout=-1.0)  # type: ignore[call-arg]
        assert rec[0].filename == __file__  # through the class's panic guard too
        with pytest.raises(TypeError, match="timeout= and timeout_s="):
            v.run(timeout=1.0, timeout_s=2.0)
        with pytest.raises(ValueError, match="timeout_s"):
            v.run_until("hlt", timeout_s=0.0)


def test_host_cpu_lists_are_pcpus_everywhere_and_the_old_cpus_name_warns_with_its_date() -> None:
    import polars as pl

    from vcpulab import quality, tracing, twins
    from vcpulab.experiment import SpinLock

    exp = twins.Experiment(SpinLock(), vcpus=2, pcpus=(0,))
    with pytest.warns(
        DeprecationWarning, match=r"Experiment\(cpus=...\) is deprecated since 2026-12-01; use pcpus="
    ) as rec:
        assert twins.Experiment(SpinLock(), vcpus=2, cpus=(0,)) == exp  # type: ignore[call-arg]
    assert rec[0].filename == __file__
    with pytest.warns(DeprecationWarning, match="Experiment.cpus is deprecated since 2026-12-01"):
        assert exp.cpus == (0,)
    with pytest.raises(TypeError, match="cpus= and pcpus="):
        twins.Experiment(SpinLock(), cpus=(0,), pcpus=(0,))  # type: ignore[call-arg]
    with pytest.warns(DeprecationWarning, match=r"default_grid\(cpus=...\) is deprecated since 2026-12-01"):
        assert twins.default_grid(cpus=[0], small=True) == twins.default_grid(pcpus=[0], small=True)  # type: ignore[call-arg]
    with pytest.warns(DeprecationWarning, match=r"snapshot\(cpus=...\)"):
        assert quality.snapshot(cpus=[0]).counters.keys() == {0}  # type: ignore[call-arg]
    with pytest.warns(DeprecationWarning, match=r"measure_cpus\(cpus=...\)"):
        assert quality.measure_cpus(cpus=[0]).cpus == [0]  # type: ignore[call-arg]
    with pytest.warns(DeprecationWarning, match=r"Trace\(cpus=...\)"), pytest.raises(ValueError, match="pcpus"):
        tracing.Trace(cpus=[-1])  # type: ignore[call-arg]
    empty = pl.DataFrame(schema=tracing.TRACE_SCHEMA)
    with pytest.warns(DeprecationWarning, match=r"other_busy_ns\(cpus=...\)"):
        assert tracing.other_busy_ns(empty, cpus=[0], own_tids=[]) == {0: 0}  # type: ignore[call-arg]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name does not warn
        assert twins.Experiment(SpinLock(), vcpus=2, pcpus=[1]).pcpus == (1,)


def test_run_pcpus_must_be_a_list_and_says_so() -> None:
    with pytest.raises(
        TypeError, match=r"pcpus must be a list of host CPU ids, e\.g\. pcpus=\[0\] for host CPU 0; got int 0"
    ):
        run(Spin(), vcpus=1, pcpus=0)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"pcpus=\[0, 1\]; got str '0-1'"):
        run(Spin(), vcpus=1, pcpus="0-1")  # type: ignore[call-overload]
