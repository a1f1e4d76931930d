"""vcpulab.validation: the registry, the eras, the scoring, and the robustness
checks of the simulator (issue #11).

Runs are short (a few ms to 100 ms simulated, 2-4 seeds) so the file stays
well under a minute on a loaded 2-core machine. Checks that today's model
fails are marked xfail(strict=True) naming the model issue they wait for:
#12 (host model: CFS, SMT, placement and balancing, ticks out of step, host
noise) or #13 (guest and pv model). The full table is benches/validation_full.py.
"""

from __future__ import annotations

import dataclasses
import math

import polars as pl
import pytest

from vcpulab import analysis, sim
from vcpulab import validation as V
from vcpulab.sim import presets
from vcpulab.validation.cases import _COMPARED, _MEASURES

# ------------------------------------------------------------------ registry


def test_every_case_is_registered_with_a_public_source_and_published_numbers():
    names = [c.name for c in V.CASES]
    assert len(names) == len(set(names)), "case names must be unique"
    assert len(V.CASES) >= 30
    for c in V.CASES:
        s = c.source
        assert s.url.startswith("https://"), c.name
        assert s.title and s.authors and s.date[:4].isdigit(), c.name
        p = c.published
        assert p.value is not None or p.sign in (-1, 1), c.name
        assert any(ch.isdigit() for ch in p.text) or p.value is None, c.name
        if p.base is not None:
            assert p.unit, c.name
            if c.metric in ("throughput_change", "wall_time_change", "latency_change"):
                assert math.isclose(p.value, p.new / p.base - 1, rel_tol=1e-9), c.name
            elif c.metric == "ratio":
                assert math.isclose(p.value, p.new / p.base, rel_tol=1e-9), c.name
        assert c.metric in V.METRICS and c.measure in _MEASURES
        assert c.expressible or c.limitation


def test_the_digest_comparisons_are_all_registered():
    names = {c.name for c in V.CASES}
    for n in (
        "ple2012_ebizzy_1x",
        "ple2012_kernbench_1x",
        "ple2012_yield_success_share_1x",
        "schedmap2012_gang_vs_ple_8x20",
        "schedmap2012_16x10_vs_8x20",
        "haltpoll2015_review_always_vs_off_idle",
        "haltpoll2015_review_dynamic_vs_off_idle",
        "haltpoll2015_v4_vs_off_250hz_2ms",
        "vcpu_is_preempted2017_fio",
    ):
        assert n in names
    parsec = [c for c in V.CASES if c.name.startswith("pcpu_is_idle2021_")]
    assert len(parsec) == 6
    ebizzy_1x = V.case("ple2012_ebizzy_1x").published
    assert (ebizzy_1x.base, ebizzy_1x.new, ebizzy_1x.unit) == (1129, 2317, "records/s")
    assert V.case("schedmap2012_gang_vs_ple_8x20").published.value == 3.88


def test_unknown_case_and_bad_arguments_raise_value_errors():
    with pytest.raises(ValueError, match="unknown case"):
        V.case("nope")
    with pytest.raises(ValueError, match="unknown case"):
        V.validate(["nope"])
    with pytest.raises(ValueError, match="seeds"):
        V.validate(["schedmap2012_16x10_vs_8x20"], seeds=0)
    with pytest.raises(ValueError, match="duration_scale"):
        V.validate(["schedmap2012_16x10_vs_8x20"], duration_scale=0)
    with pytest.raises(ValueError, match="costs"):
        V.validate(["schedmap2012_16x10_vs_8x20"], costs="nope")
    with pytest.raises(ValueError, match="limitation"):
        dataclasses.replace(V.case("ple2012_ebizzy_1x"), build=None, limitation="")
    with pytest.raises(ValueError, match="era"):
        dataclasses.replace(V.case("ple2012_ebizzy_1x"), era="1999")


# --------------------------------------------------------------------- eras


def test_every_era_value_has_a_unit_and_a_source_and_the_simulator_accepts_it():
    assert list(V.ERAS) == ["2012-3.x", "2015-4.x", "2019-5.x", "2021-5.14", "6.x"]
    for era in V.ERAS.values():
        params = era.params()
        assert params
        for path, p in params.items():
            assert p.kind in (
                "kernel default",
                "cited hardware figure",
                "measured",
                "assumption",
                "published set-up",
                "fitted",  # an adopted calibration set's value (checked with the sets below)
            )
            assert len(p.source) >= 8, path
        sim.Host(**era.values("host"))
        sim.Ple(**era.values("ple"))
        sim.Pv(**era.values("pv"))
        sim.HaltPoll(**era.values("halt_poll"))
        assert era.name in V.PENDING
    for prof in V.COSTS.values():
        for path, p in prof.params().items():
            assert len(p.source) >= 8, path
        prof.costs()  # a valid halt-poll Costs
    hw = V.COSTS["hardware"].params()
    assert hw["ple.exit_ns"].kind == "cited hardware figure"
    here = V.COSTS["this_host"].params()
    assert here["halt_poll_model.wake_to_cue_ns"].kind == "measured"


def test_eras_differ_where_the_kernels_did():
    e12, e15, e19, e6 = (V.era(n) for n in ("2012-3.x", "2015-4.x", "2019-5.x", "6.x"))
    assert e12.values("ple")["grow"] == 0 and e15.values("ple")["grow"] == 2  # dynamic PLE window, 2014
    assert e12.values("host")["yield_to_esrch"] is False and e15.values("host")["yield_to_esrch"] is True
    assert e12.guest["lock_kind"].value == "ticket" and e15.guest["lock_kind"].value == "pv_queued"
    assert e15.values("pv")["steal_time"] is False and e19.values("pv")["steal_time"] is True
    assert e19.values("host")["next_buddy"] == "always" and e6.values("host")["next_buddy"] == "eligible"
    assert e12.values("halt_poll")["policy"] == "off" and e15.values("halt_poll")["policy"] == "block-time"
    with pytest.raises(ValueError, match="unknown era"):
        V.era("1999")


def test_era_params_and_overrides_need_sources_and_reasons():
    with pytest.raises(ValueError, match="source"):
        V.Param(1, "ns", "kernel default", "")
    with pytest.raises(ValueError, match="kind"):
        V.Param(1, "ns", "folklore", "somewhere in the kernel")
    e = V.era("6.x")
    with pytest.raises(ValueError, match="reason"):
        e.with_overrides({"ple.window": (8192, "")})
    o = e.with_overrides({"ple.window": (8192, "the published run set ple_window=8192")})
    assert o.values("ple")["window"] == 8192 and "case override" in o.ple["window"].source
    assert e.values("ple")["window"] == 4096  # the era itself is unchanged


# ------------------------------------------------------- no per-case tuning


def test_no_case_changes_an_era_value_without_a_recorded_reason():
    problems = [p for c in V.CASES for p in V.check_case(c)]
    assert problems == []


def test_the_check_finds_an_era_value_changed_without_a_reason():
    c = V.case("schedmap2012_gang_vs_ple_8x20")
    inner = c.build

    def tuned(ctx, variant, seed):  # changes the era's clock behind the era's back
        cfg = inner(ctx, variant, seed)
        return cfg.replace(host=dataclasses.replace(cfg.host, tsc_khz=3_000_000))

    problems = V.check_case(dataclasses.replace(c, build=tuned))
    assert problems and "host.tsc_khz" in problems[0]

    def via_ctx(ctx, variant, seed):  # through the builder's context it is refused at once
        vm = ctx.vm(workload=presets.spinlock_microbench(), vcpus=20, count=8)
        return ctx.config(ctx.host(n_pcpus=80, tsc_khz=3_000_000), [vm], seed)

    assert "host.tsc_khz" in V.check_case(dataclasses.replace(c, build=via_ctx))[0]
    costs = dataclasses.replace(
        c,
        build=lambda ctx, v, s: inner(ctx, v, s).replace(
            vms=tuple(
                dataclasses.replace(vm, ple=dataclasses.replace(vm.ple, exit_ns=99)) for vm in inner(ctx, v, s).vms
            )
        ),
    )
    assert "ple.exit_ns" in V.check_case(costs)[0]  # cost-profile values are checked too
    # recorded as an override with its reason, the same value passes
    declared = dataclasses.replace(c, overrides={"host.tsc_khz": (3_000_000, "the published host ran at 3 GHz")})
    assert V.check_case(declared) == []
    assert declared.build(declared.ctx(V.COSTS["hardware"]), "base", 0).host.tsc_khz == 3_000_000


def test_the_check_covers_the_guest_kernel_and_a_case_varies_it_only_through_its_context():
    c = V.case("pv_wait_early2019_revert_ebizzy_3vm")
    assert V.check_case(c) == []
    built = {v: c.build(c.ctx(V.COSTS["hardware"], 0.1), v, 0) for v in c.variants}
    assert built["base"].vms[0].guest.pv_wait_early == "prev_halted_or_preempted"  # the era's 2019 guest
    assert built["new"].vms[0].guest.pv_wait_early == "prev_halted"  # the revert
    # the host of the table's first two rows, from the recorded overrides
    assert built["base"].vms[0].policy.candidate_gate == "preempted" and not built["base"].vms[0].pv.kick_yield
    inner = c.build

    def tuned(ctx, variant, seed):  # a guest field changed behind the era's back
        cfg = inner(ctx, variant, seed)
        return cfg.replace(
            vms=tuple(dataclasses.replace(vm, guest=dataclasses.replace(vm.guest, llc_vcpus=8)) for vm in cfg.vms)
        )

    problems = V.check_case(dataclasses.replace(c, build=tuned))
    assert problems and "guest.llc_vcpus" in problems[0]
    # without the knob in Case.varies the context refuses it at once
    with pytest.raises(ValueError, match="guest.pv_wait_early"):
        c.build(dataclasses.replace(c, varies=()).ctx(V.COSTS["hardware"], 0.1), "new", 0)


# -------------------------------------------------------------- statistics


def test_t_interval_jain_and_the_bimodality_gap_test():
    m, lo, hi = V.t_interval([1.0, 2.0, 3.0])
    assert m == 2.0 and math.isclose(hi - m, 4.303 * 1.0 / math.sqrt(3), rel_tol=1e-3) and lo < m < hi
    assert math.isnan(V.t_interval([1.0])[1])
    assert V.jain([5, 5, 5, 5]) == 1.0
    assert math.isclose(V.jain([1, 0, 0, 0]), 0.25)
    assert V.bimodal([100, 101, 99, 30, 31, 29, 100, 30])  # a collapse in some seeds
    assert not V.bimodal([100, 101, 99, 98, 102, 100])
    assert not V.bimodal([100, 30, 101])  # too few values to tell
    assert not V.bimodal([100, 101, 99, 30])  # one outlier is not a second mode


def test_validate_returns_one_scored_row_per_case_with_per_seed_values():
    names = ["schedmap2012_16x10_vs_8x20", "haltpoll2015_dynamic_vs_off_idle250hz", "vcpu_is_preempted2017_fio"]
    df = V.validate(names, seeds=2, duration_scale=0.1)
    assert df["case"].to_list() == names
    assert df.schema["per_seed"] == pl.List(pl.Float64)
    r = df.row(0, named=True)
    assert r["status"] == "simulated" and len(r["per_seed"]) == 2
    assert r["ci_low"] <= r["sim_mean"] <= r["ci_high"]
    assert math.isclose(r["sim_mean"], sum(r["per_seed"]) / 2)
    assert r["direction_ok"] is not None and r["within_2x"] is None  # direction-only published result
    assert r["jain_min"] is not None and 0 < r["jain_min"] <= 1
    assert isinstance(r["stable"], bool) and isinstance(r["bimodal"], bool)
    hpr = df.row(1, named=True)
    assert hpr["metric"] == "ratio" and hpr["sim_mean"] > 0 and hpr["jain_min"] is None
    ne = df.row(2, named=True)
    assert ne["status"].startswith("not expressible") and ne["sim_mean"] is None
    s = V.summary(df)
    assert s["registered"] == 3 and s["simulated"] == 2
    assert s["not_expressible"] == ["vcpu_is_preempted2017_fio"]
    assert "direction" in V.summary_line(df)
    md = V.to_markdown(df)
    assert (
        len([ln for ln in md.splitlines() if ln.startswith("| ") and "---" not in ln]) == 4 and "not expressible" in md
    )


def test_validate_pairs_by_seed():
    # the comparison is formed per seed (new_i / base_i), then averaged
    c = V.case("schedmap2012_16x10_vs_8x20")
    df = V.validate([c], seeds=[3, 4], duration_scale=0.1)
    ctx = c.ctx(V.COSTS["hardware"], 0.1, 1.0)
    expect = []
    for s in (3, 4):
        b, n = (sim.run(c.build(ctx, v, s)).summary["throughput_ops_s"][0] for v in ("base", "new"))
        expect.append(n / b)
    assert df["per_seed"][0].to_list() == pytest.approx(expect)


def test_validate_runs_through_an_executor():
    from concurrent.futures import ThreadPoolExecutor

    names = ["schedmap2012_16x10_vs_8x20"]
    local = V.validate(names, seeds=2, duration_scale=0.05)
    with ThreadPoolExecutor(2) as ex:
        remote = V.validate(names, seeds=2, duration_scale=0.05, executor=ex, batch_size=1)
    assert local["per_seed"].to_list() == remote["per_seed"].to_list()


# ------------------------------------------------------ robustness (issue #11)

from vcpulab.validation.cases import Ctx  # noqa: E402

W13 = "waits for issue #13 (simulator guest and pv model): "


def _era_ctx(name, **overrides):
    e = V.era(name)
    if overrides:
        e = e.with_overrides(
            {k: (v, "a robustness probe of the model, not a published set-up") for k, v in overrides.items()}
        )
    return Ctx(e, V.COSTS["hardware"], 1.0, 1.0, frozenset({"host.scheduler"}))


def _run(ctx, host, vms, *, seed=0, duration_ns=60_000_000, warmup_ns=20_000_000):
    return sim.run(sim.Config(host=host, vms=tuple(vms), duration_ns=duration_ns, warmup_ns=warmup_ns, seed=seed))


def _gang_over_fair(affinity, seed=0):
    ctx = _era_ctx("6.x")
    vm = ctx.vm(workload=presets.spinlock_microbench(), vcpus=20, count=8)
    runs = {
        s: sim.run(
            sim.Config(
                host=ctx.host(n_pcpus=80, scheduler=s, affinity=affinity),
                vms=(vm,),
                duration_ns=60_000_000,
                warmup_ns=20_000_000,
                seed=seed,
                trace=True,
            )
        )
        for s in ("fair", "gang")
    }
    t = {s: r.summary for s, r in runs.items()} | {f"{s}_run": r for s, r in runs.items()}
    return t["gang"]["throughput_ops_s"][0] / t["fair"]["throughput_ops_s"][0], t


def test_a_pinned_8x20_under_the_fair_scheduler_is_far_from_gang_scheduling():
    ratio, t = _gang_over_fair("pinned")
    # published (2012, ticket locks): gang = 3.88x PLE. Here (6.x) 1.31 (seeds 1-2: 1.20, 1.26) since the
    # guest's PV qspinlock has the hybrid unfair loop of v4.15 (Guest.pv_lock_steal, 0.3.28): a waiter spins
    # on the lock word past a queue whose head is preempted or halted; 2.71 (2.68, 2.67) before, when it queued
    assert ratio >= 1.15, ratio
    assert t["fair"]["ple_exits"][0] > 10 * t["gang"]["ple_exits"][0]


@pytest.mark.parametrize("affinity", ["all", "round_robin"])
def test_a_unpinned_8x20_under_the_fair_scheduler_differs_from_gang_scheduling(affinity):
    """Lock-step is co-running: under the fair class a VM runs all or none
    of its vCPUs at under half of the instants in every seed (gang: nearly
    all), its PLE exits differ from gang's, and gang is ahead at the
    median. The throughput ratio alone does not tell lock-step apart: with
    the era's switch cost (Host.switch_ns) and before the era's delayed
    dequeue (Host.delay_dequeue) the 6.x fair runs came close to gang (gang /
    fair 1.31, 1.14, 1.45, seeds 0-2) while co-running at 0.36 of the
    instants. With the delayed dequeue: 2.66, 1.60, 2.66 unpinned (co-running
    at 0.00-0.10), 1.61, 1.72, 2.08 round-robin pinned (0.07-0.16). With the
    guest's hybrid unfair PV qspinlock as well (0.3.28; a waiter spins past a
    queue whose head is preempted or halted, so the fair runs lose less to
    preempted waiters): 1.34, 1.24, 1.33 unpinned, 1.11, 1.16, 1.15
    round-robin pinned."""
    ratios = []
    for seed in range(3):
        ratio, t = _gang_over_fair(affinity, seed)
        assert t["fair"]["ple_exits"][0] != t["gang"]["ple_exits"][0]
        assert analysis.gang_share(t["fair_run"]) < 0.5 < 0.9 < analysis.gang_share(t["gang_run"]), seed
        ratios.append(ratio)
    assert sorted(ratios)[1] > 1.0, ratios


@pytest.mark.parametrize("era", ["2012-3.x", "2015-4.x", "2019-5.x", "2021-5.14", "6.x"])
def test_a_unpinned_8x20_is_not_lock_step_and_starves_no_vm_in_any_era(era):
    """Robustness (a) and (b) with each era's host (its own fair class, start
    map, placement, balancing, noise): unpinned 8 x 20 under the fair class
    is not gang scheduling — its PLE exits differ, and a VM runs all or none
    of its vCPUs at under half of the instants (gang: nearly all; the index
    start map with EEVDF and the 2012 era's buddies gave 0.95) — and no VM
    starves over the 100 ms window: each gets at least a fifth of the mean
    (the bound of tests/test_sim_host.py's symmetric 8 x 20 test). The 6.x
    era passed only since its delayed dequeue (Host.delay_dequeue): without
    it the smallest VM made 0.18-0.24 of the mean (seeds 0-7), with it
    0.43-0.86."""
    ctx = _era_ctx(era)
    vm = ctx.vm(workload=presets.spinlock_microbench(), vcpus=20, count=8)
    cfg = sim.Config(
        host=ctx.host(n_pcpus=80, affinity="all"),
        vms=(vm,),
        seed=0,
        duration_ns=140_000_000,
        warmup_ns=40_000_000,
        trace=True,
    )
    fair = sim.run(cfg)
    gang = sim.run(cfg.replace(host=ctx.host(n_pcpus=80, affinity="all", scheduler="gang")))
    assert fair.summary["ple_exits"][0] != gang.summary["ple_exits"][0]
    # gang: all-or-none at 0.99 of the instants, 0.87 in the 2019 era, whose
    # pv-spinlock waiters halt and pay the switch back in (Host.switch_ns):
    # 9,535 halts against 2,382 without the cost
    assert analysis.gang_share(gang) > 0.8
    assert analysis.gang_share(fair) < 0.5
    ops = fair.vms["ops"].to_list()
    assert min(ops) > 0.2 * sum(ops) / len(ops), ops


@pytest.mark.slow  # in CI's slow run: the default run keeps under 5 minutes on a slow hour
def test_the_order_of_the_vms_in_the_config_changes_no_vm_s_share():
    """The VM-index bias (issue #27, item 4): 2012 era, 80 CPUs, unpinned, four
    spin-lock VMs and four ebizzy-like VMs of 20 vCPUs. Listing one group
    first or second must permute the per-VM results and change nothing
    else. The start went through the wake-up path in index order, so the
    VMs listed first took CPUs of their own: the spin-lock group made 1.57-1.65x
    its throughput when listed first, and identical VMs 0 and 1 of an 8 x 20
    run 1.5-1.7x the mean in every seed. With fork placement (the start map)
    the group's throughput moves by at most 1 % with the order, and the
    eight identical VMs are at Jain 1.000 (seeds 0-2, measured)."""
    ctx = _era_ctx("2012-3.x")
    spin = ctx.vm(workload=presets.spinlock_microbench(), vcpus=20, count=4)
    ebizzy = ctx.vm(workload=presets.ebizzy_like(mmap_sem=True), vcpus=20, count=4)
    host = ctx.host(n_pcpus=80, affinity="all")
    for seed in range(2):
        groups = {}
        for order in ((spin, ebizzy), (ebizzy, spin)):
            tp = _run(ctx, host, order, seed=seed, duration_ns=80_000_000).vms["throughput_ops_s"].to_list()
            for k, vm in enumerate(order):
                groups.setdefault(vm.workload.name, []).append(sum(tp[4 * k : 4 * k + 4]) / 4)
        for name, (first, second) in groups.items():
            assert abs(first / second - 1) < 0.05, (seed, name, first, second)
    identical = ctx.vm(workload=presets.spinlock_microbench(), vcpus=20, count=8)
    tp = _run(ctx, host, [identical], seed=0, duration_ns=80_000_000).vms["throughput_ops_s"].to_list()
    assert V.jain(tp) > 0.98, tp


@pytest.mark.slow  # in CI's slow run: the default run keeps under 5 minutes on a slow hour
def test_a_forfeit_on_yield_in_one_shared_run_queue_lets_the_spinning_vms_share_collapse():
    """The 6.x rules with every vCPU thread in one task group
    (yield_scope="run_queue", e.g. VMs started outside libvirt without
    autogroup): each PLE yield forfeits up to a slice of vruntime
    (79104becf42b) against the other VMs' threads, so the VMs that spin lose
    their CPUs to those that do not: the poorest VM makes 0.24, 0.97, 0.013,
    0.006, 0.005, 0.013, 0.007 and 0.063 of the mean VM's operations (seeds
    0-7; with the placement of before 0.3.11, Host.place_lag="saved" and no
    place_rel_deadline, 7 of 8 seeds under 0.05). In the era's per-VM task
    groups the penalty stays inside each VM (and with the era's delayed
    dequeue the poorest VM makes 0.43-0.86 of the mean, the test above).

    The collapse needs waiters that keep spinning behind a preempted one:
    the guest here has the simple lock model (FIFO hand-off, as the 2012
    ticket-lock guests), 0.003, 0.007, 0.22, 0.03, 0.006 (seeds 0-4). With
    the 6.x guest's own lock, the hybrid unfair PV qspinlock (0.3.28), a
    waiter spins past a preempted or halted queue head and takes the lock,
    so a VM's forfeited CPU time does not stall its lock: the poorest VM
    makes 0.78-0.91 of the mean (0.88-0.93 in per-VM groups), and with
    v4.5-v4.14's one steal attempt 0.19-0.25 (seeds 0-4, 2026-12-07)."""
    ctx = _era_ctx("6.x", **{"host.yield_scope": "run_queue", "host.vm_groups": False, "guest.lock_model": "simple"})
    vm = ctx.vm(workload=presets.spinlock_microbench(), vcpus=20, count=8)
    poorest = []
    for seed in range(5):
        r = _run(
            ctx, ctx.host(n_pcpus=80, affinity="all"), [vm], seed=seed, duration_ns=140_000_000, warmup_ns=40_000_000
        )
        ops = r.vms["ops"].to_list()
        poorest.append(min(ops) / (sum(ops) / len(ops)))
    assert sorted(poorest)[2] < 0.1, poorest


SYMMETRIC = [
    "ple2012_ebizzy_2x",
    "ple2012_kernbench_2x",
    "ple2012_sysbench_2x",
    "schedmap2012_gang_vs_ple_8x20",
    "schedmap2012_16x10_vs_8x20",
    "boost_ready2019_ebizzy_2vm",
    "boost_ready2019_ebizzy_3vm",
]


@pytest.mark.parametrize("name", SYMMETRIC)
def test_b_symmetric_registered_setups_report_fairness_and_starve_no_vm_over_100ms(name):
    c = dataclasses.replace(V.case(name), measure_ns=100_000_000)
    cfgs = [c.build(c.ctx(V.COSTS["hardware"]), v, 0) for v in c.variants]
    cfgs = [cfg for cfg in cfgs if sum(vm.count for vm in cfg.vms) >= 2]
    _, results = sim.sweep(cfgs, results=True, progress=False)
    for r in results:
        j = V.jain(r.vms["throughput_ops_s"].to_list())
        assert 0 < j <= 1
        assert min(r.vms["ops"].to_list()) > 0, r.vms["ops"].to_list()


def test_a_vm_below_a_fifth_of_its_fair_share_is_starved_where_its_identical_siblings_average_five_operations():
    from vcpulab.validation._score import STARVED_MIN_FAIR_OPS, STARVED_SHARE, _fairness

    cfg = sim.Config(vms=(sim.Vm(vcpus=2, count=2),))

    def res(ops):
        return {"vms": pl.DataFrame({"throughput_ops_s": [float(o) for o in ops], "ops": ops})}

    assert (STARVED_MIN_FAIR_OPS, STARVED_SHARE) == (5, 0.2)
    assert _fairness(res([0, 10]), cfg)[1] == 1  # the group's mean is 5: the zero is starvation
    assert _fairness(res([0, 9]), cfg)[1] == 0  # 4.5: too short a window to tell
    assert _fairness(res([3, 9]), cfg) == (pytest.approx(V.jain([3, 9])), 0)
    # share-based: 5 of a group mean of 52.5 is under a fifth of its fair share
    assert _fairness(res([5, 100]), cfg)[1] == 1
    assert _fairness(res([12, 100]), cfg)[1] == 0  # 12 >= 0.2 x 56
    # a VM with no identical sibling (an ebizzy VM beside a stress VM) is not compared
    two = sim.Config(vms=(sim.Vm(vcpus=2), sim.Vm(vcpus=2, workload=presets.spinlock_microbench())))
    assert _fairness(res([0, 100]), two)[1] == 0


def test_b_two_symmetric_ebizzy_vms_on_16_cpus_both_make_progress_over_100ms():
    # passes since the host model (#12): CFS, host noise, seeded ties and wake-up latencies in the 2012 era
    from vcpulab.sim import policies as P

    ctx = Ctx(V.era("2012-3.x"), V.COSTS["hardware"], 1.0, 1.0, frozenset({"guest.policy"}))
    zero = []
    for pol in (P.baseline_2011(), P.dy_eligible()):
        vm = ctx.vm(workload=presets.ebizzy_like(), vcpus=16, count=2, threads=32, policy=pol)
        for seed in (0, 1, 2):
            r = _run(
                ctx,
                ctx.host(n_pcpus=16, affinity="all"),
                [vm],
                seed=seed,
                duration_ns=150_000_000,
                warmup_ns=50_000_000,
            )
            zero += [(pol.kind, seed)] if min(r.vms["ops"].to_list()) == 0 else []
    assert zero == []


@pytest.fixture(scope="module")
def quick_table():
    """Every registered case, 2 seeds, a tenth of the nominal lengths."""
    return V.validate(seeds=2, duration_scale=0.1)


def test_c_every_comparison_keeps_its_sign_at_two_lengths_or_is_flagged(quick_table):
    sim_rows = quick_table.filter(pl.col("status") == "simulated")
    assert sim_rows.height >= 20
    from vcpulab.validation._score import _sign

    for r in sim_rows.iter_rows(named=True):
        assert isinstance(r["stable"], bool), r["case"]
        if r["metric"] in _COMPARED:
            same = _sign(r["sim_mean"], r["metric"]) == _sign(r["short_mean"], r["metric"])
            unresolved = r["ci_low"] is not None and r["ci_low"] <= r["short_mean"] <= r["ci_high"]
            assert r["stable"] == (same or unresolved), r["case"]


def test_c_a_sign_difference_the_seeds_do_not_resolve_is_not_a_flip():
    from vcpulab.validation._score import _stable

    # the queue-head 2-VM row of 0.3.28's full run: seeds straddle zero, the two means either side of +2 %
    assert _stable(0.009, -0.048, 0.067, 0.025, "change") is True
    # a resolved difference: the half length's mean outside the nominal length's interval
    assert _stable(0.30, 0.25, 0.35, -0.10, "change") is False
    assert _stable(1.3, 1.2, 1.4, 0.8, "ratio") is False and _stable(1.3, 0.7, 1.9, 0.8, "ratio") is True
    # one seed: no interval, only the signs count
    nan = float("nan")
    assert _stable(0.30, nan, nan, -0.10, "change") is False and _stable(0.30, nan, nan, 0.25, "change") is True


def _flip_builder(ctx, variant, seed):
    # a comparison whose sign depends on the simulated length (8x20 vs 16x10, swapped at half length)
    small = (variant == "new") == (ctx.length == 1.0)
    vms, vcpus = (16, 10) if small else (8, 20)
    vm = ctx.vm(workload=presets.spinlock_microbench(), vcpus=vcpus, count=vms)
    return ctx.config(ctx.host(n_pcpus=80), [vm], seed)


def _bimodal_builder(ctx, variant, seed):
    # per seed, "new" is either the 16x10 or the 8x20 set-up: two modes across seeds
    vms, vcpus = (16, 10) if (variant == "new" and seed % 2) else (8, 20)
    vm = ctx.vm(workload=presets.spinlock_microbench(), vcpus=vcpus, count=vms)
    return ctx.config(ctx.host(n_pcpus=80), [vm], seed)


def test_c_a_comparison_that_changes_sign_with_the_length_is_flagged_unstable():
    c = dataclasses.replace(V.case("schedmap2012_16x10_vs_8x20"), name="flip", build=_flip_builder)
    df = V.validate([c], seeds=2, duration_scale=0.05)
    r = df.row(0, named=True)
    assert r["sim_mean"] > 1.1 and r["short_mean"] < 0.9
    assert r["stable"] is False
    assert "flip" in V.summary(df)["unstable"]


def test_d_per_seed_values_are_kept_and_bimodality_is_flagged(quick_table):
    for r in quick_table.filter(pl.col("status") == "simulated").iter_rows(named=True):
        assert len(r["per_seed"]) == 2 == r["seeds"], r["case"]
        # the mean is over the seeds with a value (t_interval drops a NaN seed,
        # e.g. one whose baseline VM made no operation in a short window)
        finite = [x for x in r["per_seed"] if math.isfinite(x)]
        want = sum(finite) / len(finite) if finite else math.nan
        assert r["sim_mean"] == pytest.approx(want, nan_ok=True), r["case"]
    c = dataclasses.replace(V.case("schedmap2012_16x10_vs_8x20"), name="two_modes", build=_bimodal_builder)
    df = V.validate([c], seeds=6, duration_scale=0.05)
    r = df.row(0, named=True)
    assert len(r["per_seed"]) == 6 and r["bimodal"] is True
    assert "two_modes" in V.summary(df)["bimodal"]


def test_lockstep_and_dead_paths_are_reported_in_the_summary(quick_table):
    s = V.summary(quick_table)
    assert set(s) >= {
        "lockstep",
        "starvation",
        "unstable",
        "bimodal",
        "identical",
        "direction_share",
        "within_2x_share",
    }
    assert s["registered"] == len(V.CASES)
    assert s["simulated"] == sum(c.expressible for c in V.CASES)
    assert 0 <= s["direction_share"] <= 1 and 0 <= s["within_2x_share"] <= 1


def test_lock_kinds_are_not_a_dead_path():
    # the 6.x era's guest runs the kernel lock model (sim.Guest(lock_model="kernel"), issue #13)
    out = {}
    for lk in ("ticket", "pv_queued"):
        ctx = _era_ctx("6.x", **{"guest.lock_kind": lk})
        vm = ctx.vm(workload=presets.ebizzy_like(), vcpus=16, count=2, threads=32)
        out[lk] = _run(ctx, ctx.host(n_pcpus=16), [vm], duration_ns=40_000_000, warmup_ns=10_000_000).summary
    assert not out["ticket"].equals(out["pv_queued"])


def test_the_ready_gate_matters_in_the_2019_setup(quick_table):
    # the two gates give different runs since the 2019 era has the host model of #12
    row = quick_table.filter(pl.col("case") == "boost_ready2019_ebizzy_2vm").row(0, named=True)
    assert row["identical"] is False


def test_pcpu_is_idle_reduces_wall_time_on_an_idle_host(quick_table):
    # 5.14's kvm_arch_vcpu_put marks every blocked vCPU preempted (Pv.preempted_byte="every_put"), so
    # available_idle_cpu refuses halted vCPUs and woken threads stack; the RFC's is_idle byte accepts them
    # (a tenth of the nominal length: 4 barrier steps, 10 lock-heavy steps; the barrier kernel's
    # nominal-length gain is tested in tests/test_sim_guest.py)
    locks = quick_table.filter(pl.col("case") == "pcpu_is_idle2021_fluidanimate").row(0, named=True)
    assert locks["sim_mean"] < -0.05
    # the barrier kernel at its nominal length (with the 2021 SMT host of the source, four barrier
    # steps of the quick table leave both placements the same run)
    barrier = V.validate(seeds=2, cases=["pcpu_is_idle2021_streamcluster"]).row(0, named=True)
    assert barrier["sim_mean"] < 0 and barrier["identical"] is False


def test_the_idle_halt_polling_cases_use_hardware_costs_not_this_hosts():
    hw, here = V.COSTS["hardware"].costs(), V.COSTS["this_host"].costs()
    assert hw != here
    for c in V.CASES:
        if c.name.startswith("haltpoll2015") and c.expressible:
            assert c.costs == "hardware"
            sc = c.build(c.ctx(V.COSTS[c.costs]), "base", 0)
            assert sc.costs == hw


def test_robustness_probes_report_each_artifact():
    from vcpulab.validation import probes

    df = probes.robustness(seeds=1, duration_scale=0.1)
    assert df["probe"].to_list() == [
        "lockstep_unpinned_8x20",
        "lockstep_unpinned_8x20",
        "index_bias_unpinned_8x20",
        "share_collapse_unpinned_8x20",
        "starvation_2x_ebizzy_16cpus",
        "dead_path_lock_kinds",
        "dead_path_threads_per_vcpu",
        "knife_edge_ple_window",
        "knife_edge_ple_window_sysbench",
    ]
    assert df["artifact"].null_count() == 0 and df["value"].is_finite().all()
    lock = df.filter(pl.col("probe") == "lockstep_unpinned_8x20")
    for r in lock.iter_rows(named=True):
        # the fair run's gang_share: a share, flagged from LOCKSTEP_SHARE up
        assert 0.0 <= r["value"] <= 1.0 and (r["artifact"] == (r["value"] >= probes.LOCKSTEP_SHARE) or r["artifact"])
        assert "gang / fair throughput" in r["detail"]
    assert "robustness probes" in probes.summary_line(df)
    assert probes.to_markdown(df).count("\n") == df.height + 1
    with pytest.raises(ValueError, match="seeds"):
        probes.robustness(seeds=0)


@pytest.mark.slow  # in CI's slow run: the default run keeps under 5 minutes on a slow hour
def test_the_2012_1x_comparisons_are_no_knife_edges_of_the_ple_window():
    """The 2012 kernbench-like 1x comparison keeps its sign and more than
    half its size when the PLE window doubles (seeds 0-2, a fifth of the
    lengths: -75 % at 4096 cycles, -60 % at 8192). With fixed 1 us holds
    every wait was a whole number of holds and the comparison fell from
    -70 % to -2.8 % (presets.kernbench_like draws its holds).

    The sysbench-like one shows no effect at either window (-1.6 % and
    -0.2 %, inside the dead band). With one lock for all its rows the VM ran
    at one mutex's pace and the comparison read +60 % at 4096 cycles and
    +14 % at 8192 (presets.sysbench_oltp_like takes its locks at many
    sites since 0.3.11)."""
    from vcpulab.validation import probes
    from vcpulab.validation._score import DEAD_BAND

    df = probes.robustness(seeds=3, duration_scale=0.2)
    edge = df.row(by_predicate=pl.col("probe") == "knife_edge_ple_window", named=True)
    assert not edge["artifact"] and edge["value"] < -0.3, edge
    edge = df.row(by_predicate=pl.col("probe") == "knife_edge_ple_window_sysbench", named=True)
    assert not edge["artifact"] and abs(edge["value"]) < DEAD_BAND, edge


def test_the_module_cli_prints_the_table_and_rejects_unknown_cases():
    import subprocess
    import sys

    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "vcpulab.validation",
            "--case",
            "schedmap2012_16x10_vs_8x20",
            "--seeds",
            "1",
            "--scale",
            "0.05",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "| schedmap2012_16x10_vs_8x20 |" in ok.stdout and "registered cases simulated" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "vcpulab.validation", "--case", "nope"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "unknown case 'nope'" in bad.stderr


def test_validate_runs_on_a_dask_cluster_with_python_policies():
    from distributed import Client, LocalCluster

    names = ["boost_ready2019_desktop_with_pv_sched_yield"]  # both variants are Python policies (OnSpinGate)
    local = V.validate(names, seeds=1, duration_scale=0.05)
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        ) as cluster,
        Client(cluster) as client,
    ):
        remote = V.validate(names, seeds=1, duration_scale=0.05, executor=client.get_executor())
    assert remote["per_seed"].to_list() == local["per_seed"].to_list()
    assert remote["status"].to_list() == ["simulated"]


def test_the_2019_boost_cases_run_ebizzy_minus_m_as_their_sources_did():
    for name in [c.name for c in V.CASES if c.name.startswith(("boost_ready2019", "boost_queue_head2019"))]:
        c = V.case(name)
        cfg = c.build(c.ctx(V.COSTS["hardware"]), "base", 0)
        vm = cfg.vms[0]
        assert vm.workload.name == "ebizzy_no_mmap_like", name
        assert vm.threads == 2 * vm.vcpus, name  # ebizzy's default: 2 threads per CPU
        # d73eb57b80b9's tests ran with PV TLB flush off (the author's reply);
        # 266e85a5ec91 does not say, but its baselines are those runs' results
        assert "pv.tlb_flush" in c.overrides, name
        assert vm.pv.tlb_flush is False, name
        # the 2019 era's kernel-mode filter: no boost of a user-mode candidate
        # with a pending posted interrupt before 52acd22faa1a (v5.13)
        assert vm.policy.user_mode_irq_boost is False, name
    ready = {r: V.case(f"boost_ready2019_ebizzy_{r}vm").published.new for r in (1, 2, 3)}
    head = {r: V.case(f"boost_queue_head2019_ebizzy_{r}vm").published.base for r in (1, 2, 3)}
    assert ready == head, (ready, head)
    assert V.era("2021-5.14").guest["policy"].value.user_mode_irq_boost is True
    # the 2012 PLE ebizzy cases keep their own preset
    for name in ("ple2012_ebizzy_1x", "ple2012_ebizzy_2x"):
        c = V.case(name)
        assert c.build(c.ctx(V.COSTS["hardware"]), "base", 0).vms[0].workload.name == "ebizzy_like"


def test_within_2x_is_the_scorers_rule_for_the_numbers_printed_next_to_a_published_one(quick_table):
    # the demo and notebook 4 print within_2x next to [S4]'s 3.88x; it must
    # be the rule validate() scores with, case by case
    rows = quick_table.filter((pl.col("status") == "simulated") & pl.col("sim_mean").is_not_null())
    assert rows.height >= 20
    for r in rows.iter_rows(named=True):
        assert V.within_2x(r["case"], r["sim_mean"]) == r["within_2x"], r["case"]
    gang = V.case("schedmap2012_gang_vs_ple_8x20")  # published 3.88x
    assert V.within_2x(gang, 3.88 / 2) and V.within_2x(gang, 3.88 * 2)
    assert not V.within_2x(gang, 1.9) and not V.within_2x(gang, 7.8)
    assert V.within_2x("schedmap2012_16x10_vs_8x20", 1.3) is None  # direction only: no number published
    with pytest.raises(ValueError, match="unknown case"):
        V.within_2x("no_such_case", 1.0)


def test_a_fitted_value_names_its_calibration_set_and_only_a_fitted_one_does():
    from vcpulab.validation.eras import ASSUMPTION, FITTED, Param

    with pytest.raises(ValueError, match="calibration"):
        Param(1, "ns", FITTED, "fitted on some cases of a set")
    with pytest.raises(ValueError, match="calibration"):
        Param(1, "ns", ASSUMPTION, "an assumption with a reason", calibration="ple2012_1x")
    assert Param(1, "ns", FITTED, "fitted on some cases of a set", calibration="ple2012_1x").calibration


def test_every_fitted_value_comes_from_a_registered_set_and_its_grid():
    """The declared calibration's bookkeeping: each fitted value of a cost
    profile or an era names a registered set, which fits that very value,
    and the value is one of the set's grid; a set's cases are registered and
    use the profile it fits."""
    from vcpulab.validation.eras import FITTED, SETS

    names = {c.name: c for c in V.CASES}
    targets = {**V.COSTS, **V.ERAS}  # a set fits a cost profile's values or an era's
    for cs in SETS.values():
        assert cs.profile in targets, cs.name
        for n in cs.cases:
            assert n in names, n
            assert (names[n].era if cs.profile in V.ERAS else names[n].costs) == cs.profile, n
    for t in targets.values():
        for path, p in t.params().items():
            if p.kind == FITTED:
                cs = SETS[p.calibration]
                # this_host takes the hardware profile's values where it measures none
                assert cs.profile in (t.name, "hardware" if t.name == "this_host" else t.name), (path, p)
                assert cs.adopted, (path, p)
                assert path in cs.grid and p.value in cs.grid[path], (path, p)
    # an adopted set's values are all in its profile or era as fitted values; a set not adopted has none there
    for cs in SETS.values():
        fitted = {k for k, p in targets[cs.profile].params().items() if p.calibration == cs.name}
        assert fitted == (set(cs.grid) if cs.adopted else set()), (cs.name, fitted)
        if cs.adopted:
            assert len(cs.outcome) > 40, "an adopted set records what its fit chose and did"


def test_the_fit_scores_its_set_only_and_ranks_the_grid():
    from vcpulab.validation import calibration as C

    grid = {"host.switch_ns": (1_500, 4_000), "host.rq_lock_ns": (300,), "ple.candidate_ns": (40,)}
    df = C.fit(seeds=1, duration_scale=0.1, grid=grid)
    assert df.height == 2 and df["rank"].to_list() == [1, 2]
    assert (df["cases"] == len(C.SETS["ple2012_1x"].cases)).all()
    # ranked: more right directions first, then more within 2x, then the smaller log error
    keys = list(zip(-df["direction_right"], -df["within_2x"], df["log_error"]))
    assert keys == sorted(keys)
    with pytest.raises(ValueError, match="must be some of"):
        C.fit(grid={"host.switch_ns": (123,)})
    with pytest.raises(ValueError, match="not among"):
        C.fit(grid={"host.tsc_khz": (1,)})
    with pytest.raises(ValueError, match="calibration set"):
        C.fit("no_such_set")


def test_the_fit_breaks_a_tie_of_log_errors_by_the_departure_from_the_documented_value():
    import polars as pl

    from vcpulab.validation import calibration as C

    rows = [  # (value, directions, within 2x, log error, departure)
        (25, 2, 2, 0.19300, 2.99),
        (150, 2, 2, 0.19302, 1.20),  # a tie with 25 (below LOG_ERROR_TIE): the nearer to the documented value wins
        (200, 2, 2, 0.23400, 0.92),  # a larger error loses whatever its departure
        (500, 2, 1, 0.10000, 0.00),  # fewer within 2x loses whatever its error
        (1000, 1, 2, 0.01000, 0.69),  # fewer directions loses first
    ]
    df = pl.DataFrame(
        [dict(zip(("v", "direction_right", "within_2x", "log_error", "departure"), r), cases=2) for r in rows]
    )
    out = C._ranked(df, ["v"])
    assert out["v"].to_list() == [150, 25, 200, 500, 1000] and out["rank"].to_list() == [1, 2, 3, 4, 5]
    assert C.LOG_ERROR_TIE == 1e-3


def test_the_adoption_rule_runs_every_probe_today_and_with_the_candidates():
    from vcpulab.validation import calibration as C
    from vcpulab.validation import probes

    kw = dict(seeds=1, duration_scale=0.05)
    # an era's value that no probe reads: every probe reads the same with it, none breaks
    df = C.adoption("parsec2021_barrier", {"programs.parsec_step_ns": 500_000}, **kw)
    assert {"lockstep_unpinned_8x20", "knife_edge_ple_window", "dead_path_lock_kinds"} <= set(df["probe"])
    assert df["value_now"].to_list() == df["value_with"].to_list() and not df["breaks"].any()
    # a cost the probes read moves them: the candidate profile reaches every probe's runs
    df = C.adoption("ple2012_1x", {"host.switch_ns": 1_500}, **kw)
    assert df.height == 9 and (df["value_now"] != df["value_with"]).sum() >= 3
    assert df["breaks"].to_list() == (~df["artifact_now"] & df["artifact_with"]).to_list()
    with pytest.raises(ValueError, match="not among"):
        C.adoption("parsec2021_barrier", {"host.switch_ns": 1})
    with pytest.raises(ValueError, match="costs must be one of"):
        probes.robustness(costs="no_such_profile")
    with pytest.raises(ValueError, match="unknown era"):
        probes.robustness(era_values={"1999": {}})


def test_a_set_of_era_values_fits_them_as_recorded_overrides_of_its_cases_only():
    from vcpulab.validation import calibration as C

    cs = C.SETS["parsec2021_barrier"]
    (path,) = cs.grid
    era = V.ERAS[cs.profile]
    sec, _, field = path.partition(".")
    assert getattr(era, sec)[field].value in cs.grid[path]
    # a candidate is a recorded override of each of the set's cases, naming the fit
    cands = C.candidate_cases(cs, {path: 100_000})
    assert [c.name for c in cands] == list(cs.cases)
    for c in cands:
        e = c.era_obj()
        assert e.params()[path].value == 100_000 and "parsec2021_barrier fit" in e.params()[path].source
    # ... and reaches the builder: the barrier preset's step, the task queue's tasks
    ctx = cands[0].ctx(V.COSTS["hardware"])
    (vm,) = cands[0].build(ctx, "base", 0).vms
    assert vm.workload.phases[0].ns == 100_000
    df = C.fit(cs, seeds=1, duration_scale=0.1, grid={path: (100_000, 500_000)})
    assert df.height == 2 and (df["cases"] == len(cs.cases)).all()
    assert sorted(df[path].to_list()) == [100_000, 500_000]
    with pytest.raises(ValueError, match="no value"):
        C.candidate_cases(cs, {"programs.no_such_value": 1})
    with pytest.raises(ValueError, match="candidate_cases"):
        C.candidate_profile(cs, {path: 100_000})
    with pytest.raises(ValueError, match="written into the era"):
        C.fitted_profile(cs, {path: 100_000}, "a test")
    with pytest.raises(ValueError, match="candidate_profile"):
        C.candidate_cases("ple2012_1x", {"host.switch_ns": 2_000})


def test_held_out_cases_are_scored_apart_from_the_calibration_set():
    from vcpulab.validation import calibration as C

    prof = C.fitted_profile(
        "ple2012_1x", {"host.switch_ns": 2_000, "host.rq_lock_ns": 300, "ple.candidate_ns": 40}, "a test"
    )
    fitted_on = {k: p.calibration for k, p in prof.params().items() if p.kind == "fitted"}
    assert {k for k, c in fitted_on.items() if c == "ple2012_1x"} == set(C.SETS["ple2012_1x"].grid)
    # the profile's other fitted values belong to the adopted halt-polling set
    assert set(fitted_on.values()) == {"ple2012_1x", "haltpoll2015_commit"}
    cases = ["ple2012_ebizzy_1x", "ple2012_ebizzy_2x", "haltpoll2015_always_vs_off_tcp_rr"]
    df = V.validate(cases, seeds=1, duration_scale=0.1, costs=prof)
    assert df["calibration"].to_list() == ["ple2012_1x", None, "haltpoll2015_commit"]
    s = V.summary(df)
    assert s["held_out"]["direction_cases"] == 1 and s["calibration"]["direction_cases"] == 2
    assert s["calibration_sets"] == ["haltpoll2015_commit", "ple2012_1x"]
    assert "held out (the headline)" in V.summary_line(df)
    with pytest.raises(ValueError, match="missing"):
        C.fitted_profile("ple2012_1x", {"host.switch_ns": 2_000}, "a test")


def test_a_long_validation_shows_progress_when_asked_and_only_then(capsys):
    kw = dict(seeds=1, duration_scale=0.05)
    V.validate(["ple2012_ebizzy_1x"], progress=True, **kw)
    assert "vcpulab.validation" in capsys.readouterr().err
    V.validate(["ple2012_ebizzy_1x"], **kw)  # pytest's stderr is not a terminal: no bar
    assert "vcpulab.validation" not in capsys.readouterr().err
    with pytest.raises(TypeError, match="progress"):
        V.validate(["ple2012_ebizzy_1x"], progress="yes", **kw)
