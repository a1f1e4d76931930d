"""An experiment script written the way a vcpulab user would write one: the
plugin's ``kvm_host`` fixture, the ``slow`` marker, and the frame assertions of
``vcpulab.testing``. Copy it as a starting point for your own."""

from __future__ import annotations

import pytest

from vcpulab.experiment import Spin, run
from vcpulab.kvm import Host
from vcpulab.testing import assert_between, assert_monotonic, remeasure


@pytest.mark.slow
def test_four_vcpus_on_two_cpus_each_get_half(kvm_host: Host) -> None:
    # Other tasks on CPUs 0 and 1 take their share too: the run's quality says
    # how much (other_share), and each of the 4 always-runnable vCPUs gets a
    # quarter of what is left of the 2 CPUs. remeasure() measures again (at
    # most 3 times) when a disturbed run fails the check, then skips naming
    # the disturbance.
    #
    # The host places the 4 threads itself (each may run on CPU 0 or 1), and
    # its load balancer leaves 3:1 splits for tens of ms at times: the lone
    # thread then has a CPU to itself. Measured on the project's host (30
    # undisturbed runs of 0.6 s, 2026-12-01): the vCPUs' mean steal was
    # within 0.02 of the fair share in every run; the lowest vCPU was 0.38
    # (fair 0.51), and a CI run saw 0.297. So the mean is held tightly and
    # each vCPU loosely: a vCPU whose steal went unaccounted (0) or that
    # never ran (1) still fails.
    def check(r):  # type: ignore[no-untyped-def]
        fair = 1 - 2 * (1 - r.quality.other_share) / 4  # one half on quiet CPUs
        sf = r.steal_fraction()
        # together the vCPUs waited on run queues exactly what 4 runnable threads on 2 CPUs must ...
        mean = sf["steal_fraction"].mean()
        assert abs(mean - fair) < 0.05, (mean, fair)
        # ... and each waited about its fair share of the time
        assert_between(sf, "steal_fraction", fair - 0.3, fair + 0.3)

    r = remeasure(
        lambda: run(
            Spin(), vcpus=4, pcpus=[0, 1], duration_s=0.6, sample_every_s=0.02, host=kvm_host, warn_quality=False
        ),
        check,
        quality=lambda r: r.quality,
    )
    # ... its steal time only ever grew ...
    assert_monotonic(r.samples, "steal_ns")
    # ... and no vCPU starved
    assert_between(r.results, "pauses", lo=1)
