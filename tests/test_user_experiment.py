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
    def check(r):  # type: ignore[no-untyped-def]
        fair = 1 - 2 * (1 - r.quality.other_share) / 4  # one half on quiet CPUs
        # every vCPU waited on a run queue about its fair share of the time ...
        assert_between(r.steal_fraction(), "steal_fraction", fair - 0.2, fair + 0.2)

    r = remeasure(
        lambda: run(Spin(), vcpus=4, pcpus=[0, 1], duration_s=0.6, sample_every_s=0.02, host=kvm_host, warn_quality=False),
        check,
        quality=lambda r: r.quality,
    )
    # ... its steal time only ever grew ...
    assert_monotonic(r.samples, "steal_ns")
    # ... and no vCPU starved
    assert_between(r.results, "pauses", lo=1)
