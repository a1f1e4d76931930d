"""The published scenarios (docs/sources.md), in direction and rough magnitude.

Short simulated durations keep this file to a few seconds; each assertion
states its tolerance. The longer versions and the numbers next to the
published ones are in benches/sim_bench.py and docs/simulator.md.
"""

from __future__ import annotations

import functools

import pytest

from vcpulab import sim
from vcpulab.sim import policies as P
from vcpulab.sim import scenarios as S

POLICIES = {
    "baseline2011": P.baseline_2011(),
    "dy_eligible": P.dy_eligible(),
    "upstream": P.upstream(),
    "random": P.random(),
    "oracle": P.oracle(),
}


@functools.cache
def ebizzy(overcommit: int, policy: str) -> float:
    # 20 ms of a 32-CPU host: about 60k-80k iterations per run
    r = sim.run(S.ebizzy_2012(overcommit, POLICIES[policy], duration_ns=20_000_000, seed=0))
    return r.summary["throughput_ops_s"][0]


@functools.cache
def sched_map(vms: int, vcpus: int, scheduler: str, policy: str = "upstream") -> float:
    # 80 ms with 30 ms of warm-up: the PLE runs need ~50 ms to reach their steady state
    cfg = S.sched_map_2012(
        vms, vcpus, scheduler=scheduler, policy=POLICIES[policy], duration_ns=80_000_000, warmup_ns=30_000_000, seed=1
    )
    return sim.run(cfg).summary["throughput_ops_s"][0]


def test_a_dy_eligible_beats_the_2012_baseline_more_at_1x_than_at_2x():
    gain_1x = ebizzy(1, "dy_eligible") / ebizzy(1, "baseline2011")
    gain_2x = ebizzy(2, "dy_eligible") / ebizzy(2, "baseline2011")
    # [S1]: +105 % at 1x. Here about +50 % at 1x and +8 % at 2x; require
    # >= +20 % at 1x, no loss at 2x, and a larger gain at 1x.
    assert gain_1x >= 1.2, gain_1x
    assert gain_2x >= 1.0, gain_2x
    assert gain_1x > gain_2x + 0.1, (gain_1x, gain_2x)


def test_b_gang_doubles_ple_at_8x20_and_16x10_comes_much_closer():
    r820 = sched_map(8, 20, "gang") / sched_map(8, 20, "fair")
    r1610 = sched_map(16, 10, "gang") / sched_map(16, 10, "fair")
    # [S4]: gang = 3.88x PLE at 8 x 20; 16 x 10 "clean, good performance".
    # Here about 3.8x and 1.6x; require >= 2x, and 16 x 10 at most 70 % of 8 x 20's gap.
    assert r820 >= 2.0, r820
    assert r1610 <= 0.7 * r820, (r1610, r820)
    assert r1610 < 2.0, r1610


@functools.cache
def parsec_wall(placement: str, background: float) -> float:
    # 40 barrier steps of ~0.5 ms, 3 seeds averaged (about 30-60 ms simulated each)
    walls = [sim.run(S.pcpu_is_idle_2021(placement, background, seed=s)).vms["wall_ns"][0] for s in range(3)]
    return sum(walls) / len(walls)


def test_c_pcpu_is_idle_placement_reduces_wall_time_more_on_a_more_idle_host():
    gain = {bg: 1 - parsec_wall("pcpu_is_idle", bg) / parsec_wall("available_idle", bg) for bg in (0.1, 0.2, 0.4)}
    # [S3] (idle host, 16 threads): 50-84 % less wall time. Here (12 threads,
    # see scenarios.pcpu_is_idle_2021) about 33 % at 10 and 20 % host load and
    # 14 % at 40 %; require > 5 % at each, and more on the more idle hosts.
    assert all(g > 0.05 for g in gain.values()), gain
    assert gain[0.1] > gain[0.4], gain
    assert gain[0.2] > gain[0.4], gain
    # The share of the host load's penalty that pcpu_is_idle removes grows with
    # host idleness: ~98 % at 10 % load (it runs as fast as on an idle host),
    # ~77 % at 20 %, ~28 % at 40 %. Require > 90 %, then strictly decreasing.
    idle = parsec_wall("available_idle", 0.0)
    removed = {
        bg: (parsec_wall("available_idle", bg) - parsec_wall("pcpu_is_idle", bg))
        / (parsec_wall("available_idle", bg) - idle)
        for bg in (0.1, 0.2, 0.4)
    }
    assert removed[0.1] > 0.9, removed
    assert removed[0.1] > removed[0.2] > removed[0.4], removed


def test_c_unpinned_vcpus_escape_host_load_so_placement_hardly_matters():
    # with vCPU threads free to move, the host wakes a vCPU on an idle CPU:
    # 40 % host load costs < 5 % wall time and pcpu_is_idle changes < 3 %
    walls = {
        (pl, bg): sum(sim.run(S.pcpu_is_idle_2021(pl, bg, affinity="all", seed=s)).vms["wall_ns"][0] for s in range(3))
        for pl in ("available_idle", "pcpu_is_idle")
        for bg in (0.0, 0.4)
    }
    assert walls["available_idle", 0.4] < 1.05 * walls["available_idle", 0.0], walls
    assert abs(walls["pcpu_is_idle", 0.4] / walls["available_idle", 0.4] - 1) < 0.03, walls


@pytest.mark.parametrize("threads", [12, 16])
def test_c_without_host_load_both_placements_are_the_same_run(threads):
    # pcpu_is_idle only changes a choice when some vCPU's host CPU runs
    # something else: with no background load every guest-idle vCPU passes
    # both tests and the runs are identical, event for event.
    a, p = (sim.run(S.pcpu_is_idle_2021(pl, 0.0, threads=threads, seed=1)) for pl in ("available_idle", "pcpu_is_idle"))
    assert a.summary["events"][0] > 0
    assert a.summary.equals(p.summary)
    assert a.vcpus.equals(p.vcpus)
    assert a.vms["wall_ns"][0] > 0
    assert a.vms["wall_ns"].equals(p.vms["wall_ns"])


@pytest.mark.parametrize("overcommit", [1, 2])
def test_d_oracle_bounds_every_policy_on_ebizzy(overcommit):
    best = ebizzy(overcommit, "oracle")
    for name in ("baseline2011", "dy_eligible", "upstream", "random"):
        # the oracle's examination costs a candidate check: allow 1 %
        assert best >= 0.99 * ebizzy(overcommit, name), name


def test_d_the_oracle_bounds_the_2012_handlers_where_a_holder_and_its_waiter_share_a_cpu():
    """ebizzy-like, 16 vCPUs and 32 threads on 8 CPUs, the 2012 era (CFS,
    ticket locks, switches of 2 us). Until 0.3.12 the oracle ran far below
    the handlers it should bound (0-629 records in 6 ms against ~800): it
    yielded to a ticket waiter ahead while the holder ran, preempting the
    holder when both queued on one CPU, and a yield's late boost preempted
    its own target once another switch had started it. Measured since,
    seeds 0-4: oracle 1775-1917, the 2011 handler 786-846, dy_eligible
    806-811."""
    import dataclasses

    from vcpulab.sim import presets
    from vcpulab.validation import cases as C
    from vcpulab.validation.eras import COSTS

    case = {c.name: c for c in C.CASES}["ple2012_ebizzy_2x"]
    ctx = case.ctx(COSTS[case.costs])

    def ops(policy: str, seed: int) -> int:
        vm = ctx.vm(workload=presets.ebizzy_like(), vcpus=16, threads=32, policy=POLICIES[policy])
        cfg = ctx.config(ctx.host(n_pcpus=8, affinity="all"), [vm], seed)
        return sim.run(dataclasses.replace(cfg, duration_ns=8_000_000, warmup_ns=2_000_000)).vms["ops"][0]

    for seed in (0, 1):
        best = ops("oracle", seed)
        for name in ("baseline2011", "dy_eligible"):
            assert best > 1.2 * ops(name, seed), (name, seed)


@pytest.mark.slow  # in CI's slow run: the default run keeps under 5 minutes on a slow hour
def test_d_oracle_bounds_every_policy_on_the_8x20_sched_map():
    best = sched_map(8, 20, "fair", "oracle")
    for name in ("baseline2011", "dy_eligible", "upstream", "random"):
        assert best >= 0.99 * sched_map(8, 20, "fair", name), name


@pytest.mark.parametrize("seed", [0, 1])
def test_ticket_locks_without_directed_yield_collapse_into_a_convoy_of_preempted_waiters(seed):
    """Lock-waiter preemption (J. Ouyang and J. R. Lange, "Preemptable Ticket
    Spinlocks: Improving Consolidated Performance in the Cloud", VEE 2013,
    https://doi.org/10.1145/2451512.2451549): a ticket lock hands itself to
    the next waiter in line even while that waiter's vCPU is preempted, so at
    2x every hand-off to a descheduled vCPU waits for its next host slice.
    Once every vCPU's thread is queued the VM advances one hold per such
    wait. Measured (ebizzy-like 2x, 2012 host, no directed yield, 20 ms after
    20 ms of warm-up, seeds 0-1): ticket 8-16 iterations per VM with all 32
    vCPUs queued at the end; TAS (a running spinner takes the lock)
    3,196-4,385; pv_queued (waiters halt, the unlocker kicks) 9,620-9,638;
    ticket with the 2011 directed yield 4,693-4,718."""

    def ops(kind: str, policy) -> list[int]:  # type: ignore[no-untyped-def]
        cfg = S.ebizzy_2012(2, policy, duration_ns=40_000_000, seed=seed).replace(warmup_ns=20_000_000)
        cfg = cfg.with_path("vms.0.workload", sim.presets.ebizzy_like(lock_kind=kind))
        r = sim.run(cfg)
        if kind == "ticket" and policy.kind == "no_yield":
            # the convoy: every vCPU's current thread waits in the ticket queue
            assert r.vms["lock_waits_open"].to_list() == [32, 32]
        return r.vms["ops"].to_list()

    convoy = ops("ticket", P.no_yield())
    for other in (ops("tas", P.no_yield()), ops("pv_queued", P.no_yield()), ops("ticket", P.baseline_2011())):
        assert all(o > 20 * max(c, 1) for o, c in zip(other, convoy)), (other, convoy)
