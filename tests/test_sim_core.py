"""vcpulab.sim: configuration, determinism, conservation, Python policies."""

from __future__ import annotations

import pickle
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from vcpulab import sim
from vcpulab.sim import policies as P
from vcpulab.sim import presets

RUN_COLS_P = ["useful_ns", "spin_ns", "ple_ns", "exit_ns", "idle_poll_ns", "polling_ns", "bg_ns", "idle_ns"]


def small(**kw) -> sim.Config:
    vm = sim.Vm(vcpus=4, count=2, **kw)
    return sim.Config(host=sim.Host(n_pcpus=4), vms=(vm,), duration_ns=10_000_000, seed=3)


def assert_conserved(r: sim.Result) -> None:
    d = r.summary["duration_ns"][0]
    tot = r.pcpus.select(pl.sum_horizontal(RUN_COLS_P)).to_series()
    assert (tot == d).all(), tot
    v = r.vcpus.select(pl.col("running_ns") + pl.col("wait_ns") + pl.col("halted_ns")).to_series()
    assert (v == d).all(), v
    run = r.vcpus.select(
        pl.sum_horizontal(["useful_ns", "spin_ns", "ple_ns", "exit_ns", "idle_poll_ns", "polling_ns"])
    ).to_series()
    assert (run == r.vcpus["running_ns"]).all()


# ----------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: sim.Host(n_pcpus=0), "Host.n_pcpus must be >= 1, got 0"),
        (lambda: sim.Host(scheduler="bfs"), "Host.scheduler must be one of"),
        (lambda: sim.Host(next_buddy="sometimes"), "Host.next_buddy"),
        (lambda: sim.Background(utilization=1.0), "Background.utilization"),
        (lambda: sim.Ple(window=0), "Ple.window must be >= 1"),
        (lambda: sim.Ple(window=5000, max=4096), "Ple.max must be >= Ple.window"),
        (lambda: sim.Ple(grow=-1), "Ple.grow"),
        (lambda: sim.Policy(kind="magic"), "Policy.kind"),
        (lambda: sim.Pv(placement="anywhere"), "Pv.placement"),
        (lambda: sim.HaltPoll(policy="v5"), "HaltPoll.policy"),
        (lambda: sim.HaltPoll(max_ns=-1), "HaltPoll.max_ns"),
        (lambda: sim.Compute(-1), "Compute.ns must be >= 0"),
        (lambda: sim.Lock(0, "spin", 10), "Lock.lock_kind"),
        (lambda: sim.Sleep(10, prob=1.5), "Sleep.prob"),
        (lambda: sim.Barrier(prob=0.5), "Barrier.prob"),
        (lambda: sim.Workload(phases=()), "Workload.phases"),
        (lambda: sim.Workload(phases=(sim.Recv(), sim.Compute(10))), "Recv phase needs a Send"),
        (lambda: sim.Vm(vcpus=0), "Vm.vcpus must be >= 1"),
        (lambda: sim.Vm(vcpus=2, threads=100), "Vm.threads"),
        (lambda: sim.Config(duration_ns=0), "Config.duration_ns"),
        (lambda: sim.Config(vms=()), "Config.vms"),
        (lambda: sim.Host(n_pcpus=True), "Host.n_pcpus must be an int"),
        (lambda: P.python(42), "Policy.fn must be callable"),
    ],
)
def test_bad_values_raise_valueerror_naming_the_field(make, field):
    with pytest.raises(ValueError, match=field.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_config_round_trips_through_dict_json_and_pickle():
    cfg = sim.Config(
        host=sim.Host(n_pcpus=8, background=sim.Background(0.1)),
        vms=(
            sim.Vm(vcpus=4, workload=presets.sysbench_oltp_like(), policy=P.upstream(last_boosted_bug=True)),
            sim.Vm(vcpus=2, count=3, ple=sim.Ple.svm(), workload=presets.parsec_barrier_like()),
        ),
        seed=7,
    )
    assert sim.Config.from_dict(cfg.to_dict()) == cfg
    assert sim.Config.from_json(cfg.to_json()) == cfg
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    assert hash(cfg) == hash(sim.Config.from_json(cfg.to_json()))
    assert cfg.config_hash() == sim.Config.from_json(cfg.to_json()).config_hash()
    assert cfg.with_path("host.n_pcpus", 16).host.n_pcpus == 16
    assert cfg.with_path("vms.1.policy", P.oracle()).vms[1].policy.kind == "oracle"
    with pytest.raises(ValueError, match="no field"):
        cfg.with_path("host.cores", 1)
    with pytest.raises(ValueError, match="has no field"):
        sim.Host.from_dict({"n_pcpus": 2, "cores": 1})


def test_rust_validates_again():
    from vcpulab import _core

    d = small().to_dict()
    d["host"]["n_pcpus"] = 0
    import json

    with pytest.raises(ValueError, match="host.n_pcpus must be >= 1, got 0"):
        _core.sim_run(json.dumps(d))
    with pytest.raises(ValueError, match="invalid configuration JSON"):
        _core.sim_run("{not json")


# -------------------------------------------------------- determinism & conservation


def test_same_seed_identical_frames_other_seed_differs():
    cfg = small()
    a, b = sim.run(cfg, trace=True), sim.run(cfg, trace=True)
    for name in ("summary", "vms", "vcpus", "pcpus", "trace"):
        assert getattr(a, name).equals(getattr(b, name)), name
    c = sim.run(cfg.replace(seed=4))
    assert not c.vcpus.equals(a.vcpus)


def test_sweep_on_one_and_two_threads_is_identical():
    base = small()
    grid = {"vms.0.policy": [P.upstream(), P.dy_eligible(), P.random()], "seed": [1, 2]}
    one = sim.sweep(base, grid, threads=1, progress=False)
    two = sim.sweep(base, grid, threads=2, progress=False)
    assert one.drop("events").equals(two.drop("events"))
    assert one.equals(two)
    assert one.height == 6
    assert one["vms.0.policy"].to_list()[:2] == ["upstream", "upstream"]
    assert "config_hash" in one.columns


def test_sweep_of_a_list_and_full_results():
    cfgs = [small(), small().replace(seed=9)]
    df, res = sim.sweep(cfgs, threads=2, progress=True, results=True)
    assert df["point"].to_list() == [0, 1]
    assert res[1].config.seed == 9
    assert res[0].summary.equals(sim.run(cfgs[0]).summary)


@pytest.mark.parametrize("scheduler", ["fair", "gang"])
@pytest.mark.parametrize("lock_kind", ["tas", "ticket", "queued", "pv_queued", "mutex"])
def test_conservation_for_every_lock_kind(lock_kind, scheduler):
    wl = sim.Workload(
        phases=(
            sim.Compute(10_000, dist="exp"),
            sim.Lock(0, lock_kind, 3_000, dist="uniform"),
            sim.Ipi(0, 1_000, prob=0.2),
            sim.Send(1),
            sim.Recv(),
            sim.Sleep(5_000, dist="exp", prob=0.3),
            sim.Barrier(),
        )
    )
    cfg = sim.Config(
        host=sim.Host(n_pcpus=3, scheduler=scheduler, background=sim.Background(0.2)),
        vms=(sim.Vm(vcpus=4, count=2, threads=6, workload=wl, pv=sim.Pv(guest_idle_poll_ns=20_000)),),
        duration_ns=5_000_000,
    )
    r = sim.run(cfg, trace=True)
    assert_conserved(r)
    assert r.summary["ops"][0] > 0
    t = r.trace
    assert (t["end_ns"] >= t["start_ns"]).all()
    assert set(t["why"].unique()) <= {
        "tick",
        "wakeup_preempt",
        "boost",
        "gang",
        "exit_resched",
        "yield",
        "halt",
        "sleep",
        "idle",
        "end",
    }


def test_fixed_iterations_give_wall_time():
    cfg = sim.Config(
        host=sim.Host(n_pcpus=8),
        vms=(sim.Vm(vcpus=4, workload=presets.parsec_barrier_like(compute_ns=50_000, iterations=20)),),
        duration_ns=1_000_000_000,
    )
    r = sim.run(cfg)
    assert r.summary["finished"][0]
    assert r.vms["ops"][0] == 80
    assert r.vms["wall_ns"][0] == r.summary["duration_ns"][0] < 1_000_000_000
    assert_conserved(r)


# -------------------------------------------------------------- Python policies


def test_python_dy_eligible_gives_exactly_the_builtin_result():
    # scenario (e) of docs/simulator.md, on an overcommitted host with two VMs of the same entry
    cfg = sim.Config(
        host=sim.Host(n_pcpus=6),
        vms=(sim.Vm(vcpus=6, count=2, threads=12, workload=presets.ebizzy_like(), ple=sim.Ple.fixed()),),
        duration_ns=20_000_000,
        seed=11,
    )
    a = sim.run(cfg.with_path("vms.0.policy", P.dy_eligible()), trace=True)
    b = sim.run(cfg.with_path("vms.0.policy", P.python(P.DyEligibleInPython())), trace=True)
    assert a.summary["yield_attempts"][0] > 100
    assert a.vcpus.equals(b.vcpus)
    assert a.pcpus.equals(b.pcpus)
    assert a.trace.equals(b.trace)
    assert a.summary.equals(b.summary)
    assert a.vms.drop("policy").equals(b.vms.drop("policy"))


def test_python_policy_sees_states_and_may_decline():
    seen = []

    def never(spinner, cands):
        seen.append((spinner.index, spinner.n_vcpus, len(cands), spinner.attempts))
        assert spinner.index not in [c.index for c in cands]
        assert isinstance(cands[0], sim.VcpuView)
        return None

    cfg = small(policy=P.python(never), ple=sim.Ple.fixed())  # no IPIs: no PV sched-yield either
    r = sim.run(cfg.with_path("host.n_pcpus", 2))
    assert r.summary["yield_attempts"][0] == 0
    # the callable was deep-copied for the run, so `seen` of this function object
    # (functions deep-copy to themselves) is filled
    assert seen and all(n == 4 and k == 3 and a == [] for _, n, k, a in seen)


def test_python_policy_errors_reach_python():
    def boom(spinner, cands):
        raise ZeroDivisionError("policy bug")

    cfg = small(policy=P.python(boom, name="boom"), ple=sim.Ple.fixed()).with_path("host.n_pcpus", 2)
    with pytest.raises(ZeroDivisionError, match="policy bug") as ei:
        sim.run(cfg)
    # its own type, the call named as a real run under vcpulab's scheduler names it, the original as the cause
    msg = str(ei.value)
    assert "VM 0's policy 'boom' raised on the pause-loop exit of vCPU " in msg and " ns simulated: " in msg
    assert isinstance(ei.value.__cause__, ZeroDivisionError) and str(ei.value.__cause__) == "policy bug"
    # in a sweep, the point is a note on it
    with pytest.raises(ZeroDivisionError, match="policy bug") as ei:
        sim.sweep(cfg, {"seed": [1]}, progress=False)
    assert getattr(ei.value, "__notes__", []) == ["in sweep point 0"]

    def bad(spinner, cands):
        return spinner.index  # not a candidate

    with pytest.raises(ValueError, match="not a candidate"):
        sim.run(small(policy=P.python(bad), ple=sim.Ple.fixed()).with_path("host.n_pcpus", 2))

    with pytest.raises(ValueError, match="must return a vCPU index"):
        sim.run(small(policy=P.python(lambda s, c: "x", name="strs"), ple=sim.Ple.fixed()).with_path("host.n_pcpus", 2))


def test_python_policy_without_callable_is_rejected():
    cfg = sim.Config.from_dict(small(policy=P.python(P.DyEligibleInPython())).to_dict())
    with pytest.raises(ValueError, match="has no callable"):
        sim.run(cfg)


def test_kernel_rule_counters_are_consistent():
    cfg = sim.Config(
        host=sim.Host(n_pcpus=4),
        vms=(sim.Vm(vcpus=4, count=2, threads=8, workload=presets.ebizzy_like()),),
        duration_ns=20_000_000,
    )
    r = sim.run(cfg)
    s = r.summary
    assert s["yield_attempts"][0] == s["yield_ok"][0] + s["yield_esrch"][0] + s["yield_zero"][0]
    # VMX windows are powers of two of 4096 up to UINT_MAX
    for w in r.vcpus["ple_window_max"]:
        assert w == 2**32 - 1 or (w % 4096 == 0 and (w // 4096) & (w // 4096 - 1) == 0)
    # a halted vCPU is never reported preempted; preemptions happen on this host
    assert s["preemption_reported"][0] > 0 and s["preemption_other"][0] > 0


def test_sched_map_from_the_trace():
    cfg = small()
    r = sim.run(cfg, trace=True)
    m = r.sched_map(bin_ns=100_000)
    assert m.shape == (4, 100)
    # every vCPU of both VMs shows up, and (no background load) nothing else but idle
    codes = set(np.unique(m).tolist())
    assert codes <= {vm * 65536 + v for vm in range(2) for v in range(4)} | {-2}
    assert len(codes - {-2}) == 8
    # the busy fraction of each CPU matches the time accounting to within a bin per switch
    busy = (m != -2).mean(axis=1)
    acct = 1 - r.pcpus["idle_ns"].to_numpy() / r.summary["duration_ns"][0]
    assert np.allclose(busy, acct, atol=0.05)
    with pytest.raises(ValueError, match="trace=True"):
        sim.run(cfg).sched_map()
    img = r.sched_map_rgb(bin_ns=100_000)
    assert img.shape == (4, 100, 3) and img.dtype == np.uint8
    assert ((img == 255).all(axis=2) == (m == -2)).all()  # white = idle


def test_the_trace_is_compact_ordered_by_end_and_joins_the_int64_frames():
    # 29 bytes a row (32 with polars' older four-byte enums): Int32 keys, a
    # one-byte enum why; rows in the order their intervals ended
    r = sim.run(small(), trace=True)
    t = r.trace
    assert t is not None and t.height > 100
    assert t.schema["pcpu"] == t.schema["vm"] == t.schema["vcpu"] == pl.Int32
    assert t.schema["start_ns"] == t.schema["end_ns"] == pl.UInt64
    assert isinstance(t.schema["why"], pl.Enum)
    assert t.estimated_size() / t.height <= 32
    assert t["end_ns"].is_sorted() and (t["start_ns"] <= t["end_ns"]).all()
    assert set(t["why"].cast(pl.String).unique()) <= set(t.schema["why"].categories)  # type: ignore[union-attr]
    # the Int32 keys join the Int64 keys of the other frames as equal ones
    # do: each vCPU's traced intervals add up to its time on a CPU
    traced = (
        t.filter(pl.col("vcpu") >= 0)
        .group_by("vm", "vcpu")
        .agg(on_cpu_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    )
    joined = traced.join(r.vcpus.select("vm", "vcpu", "running_ns"), on=["vm", "vcpu"])
    assert joined.height == r.vcpus.height == 8
    assert (joined["on_cpu_ns"].cast(pl.Int64) == joined["running_ns"].cast(pl.Int64)).all()


def test_a_sched_map_of_a_window_is_the_whole_maps_columns_there():
    r = sim.run(small(), trace=True)
    whole = r.sched_map(bin_ns=100_000)
    win = r.sched_map(bin_ns=100_000, start_ns=2_000_000, end_ns=5_000_000)
    assert win.shape == (4, 30) and np.array_equal(win, whole[:, 20:50])
    rgb = r.sched_map_rgb(bin_ns=100_000, start_ns=2_000_000, end_ns=5_000_000)
    assert np.array_equal(rgb, r.sched_map_rgb(bin_ns=100_000)[:, 20:50])
    with pytest.raises(ValueError, match="end_ns"):
        r.sched_map(start_ns=2_000_000, end_ns=2_000_000)
    with pytest.raises(ValueError, match="start_ns"):
        r.sched_map(start_ns=-1)


def test_sweep_with_python_policies_on_two_threads():
    base = small(ple=sim.Ple.fixed(), workload=presets.ebizzy_like()).with_path("host.n_pcpus", 3)
    grid = {"vms.0.policy": [P.python(P.DyEligibleInPython()), P.dy_eligible()], "seed": [1, 2]}
    one = sim.sweep(base, grid, threads=1, progress=False)
    two = sim.sweep(base, grid, threads=2, progress=False)
    assert one.equals(two)
    py, builtin = (
        one.filter(pl.col("vms.0.policy") != "dy_eligible"),
        one.filter(pl.col("vms.0.policy") == "dy_eligible"),
    )
    assert py.drop("vms.0.policy", "config_hash").equals(builtin.drop("vms.0.policy", "config_hash"))


def test_ctrl_c_interrupts_a_long_run():
    import os
    import signal
    import threading

    cfg = sim.Config(
        host=sim.Host(n_pcpus=80),
        vms=(sim.Vm(vcpus=20, count=8, workload=presets.spinlock_microbench()),),
        duration_ns=60_000_000_000,  # a minute of wall time if the interrupt were missed
    )
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sim.run(cfg)
    finally:
        timer.cancel()


def test_weights_share_the_cpu_in_proportion():
    wl = sim.Workload(phases=(sim.Compute(1_000_000),))
    cfg = sim.Config(
        host=sim.Host(n_pcpus=2, affinity="round_robin"),
        vms=(sim.Vm(vcpus=2, weight=2048, workload=wl), sim.Vm(vcpus=2, weight=1024, workload=wl)),
        duration_ns=200_000_000,
    )
    r = sim.run(cfg)
    run = r.vms["running_ns"] if "running_ns" in r.vms.columns else r.vms["useful_ns"]
    ratio = run[0] / run[1]
    # EEVDF shares by weight; slices end at ticks, so allow 10 %
    assert 1.8 < ratio < 2.2, ratio
    with pytest.raises(ValueError, match="Vm.weight"):
        sim.Vm(weight=1)


def pingpong(halt_poll: sim.HaltPoll, pcpus: int = 4, count: int = 1) -> sim.Config:
    wl = sim.Workload(phases=(sim.Compute(20_000, dist="exp"), sim.Send(1), sim.Recv()))
    return sim.Config(
        host=sim.Host(n_pcpus=pcpus),
        vms=(sim.Vm(vcpus=2, threads=2, count=count, workload=wl, halt_poll=halt_poll),),
        duration_ns=20_000_000,
    )


@pytest.mark.parametrize("policy", ["off", "fixed", "block-time", "dynamic-v3", "dynamic-v4"])
def test_halt_polling_stats_and_conservation(policy):
    r = sim.run(pingpong(sim.HaltPoll(policy=policy)))
    assert_conserved(r)
    v = r.vcpus
    assert (v["halt_attempted_poll"] >= v["halt_successful_poll"]).all()
    polled = v["halt_poll_success_ns"] + v["halt_poll_fail_ns"]
    # every finished halt is accounted; at most one unfinished one per vCPU
    assert ((v["polling_ns"] >= polled) & (v["polling_ns"] - polled <= 200_000)).all()
    if policy == "off":
        assert v["polling_ns"].sum() == 0 and v["halt_attempted_poll"].sum() == 0
    else:
        # message passing on an idle host: most halts end while polling
        assert v["halt_successful_poll"].sum() > 0.5 * v["halt_attempted_poll"].sum()
        assert v["halt_wait_ns"].sum() < sim.run(pingpong(sim.HaltPoll())).vcpus["halt_wait_ns"].sum()
    if policy == "block-time":
        # the window grew from 0 by grow_start, ×2, capped by max_ns at the next halt
        w = v["halt_poll_window_ns"].to_list()
        assert all(x == 0 or x % 10_000 == 0 for x in w) and max(w) >= 10_000
    if policy == "dynamic-v4":
        # v4 starts at the maximum and only an idle (> 10 ms) halt shrinks it:
        # a message-passing guest keeps it there ([S5]: "always maxed out")
        assert v["halt_poll_window_ns"].to_list() == [200_000, 200_000]


def test_a_guest_that_turns_host_polling_off_never_polls():
    # MSR_KVM_POLL_CONTROL = 0: kvm_vcpu_halt blocks at once, whatever the policy
    v = sim.run(pingpong(sim.HaltPoll(policy="fixed", poll_allowed=False))).vcpus
    assert v["halt_exits"].sum() > 100
    assert v["halt_attempted_poll"].sum() == 0 and v["polling_ns"].sum() == 0
    assert v["halt_wakeup"].sum() > 0
    with pytest.raises(ValueError, match="HaltPoll.poll_allowed"):
        sim.HaltPoll(poll_allowed=1)  # type: ignore[arg-type]


def test_a_vcpu_descheduled_while_polling_resumes_its_halt():
    # Gang scheduling switches a whole VM out at its slice end, polling vCPUs
    # included; the kernel's poll loop then goes on when the thread runs again.
    wl = sim.Workload(phases=(sim.Compute(20_000, dist="exp"), sim.Send(1), sim.Recv()))
    cfg = sim.Config(
        host=sim.Host(n_pcpus=2, scheduler="gang", gang_slice_ns=1_000_000),
        vms=(sim.Vm(vcpus=2, threads=2, count=2, workload=wl, halt_poll=sim.HaltPoll(policy="fixed", max_ns=400_000)),),
        duration_ns=20_000_000,
    )
    r = sim.run(cfg)
    assert_conserved(r)
    v = r.vcpus
    assert v["polling_ns"].sum() > 0
    assert (v["halt_successful_poll"] <= v["halt_attempted_poll"]).all()
    assert (v["halt_attempted_poll"] <= v["halt_exits"]).all()
    # every halt ends by a successful poll or a wake-up from sleep, or is the
    # one still open at the end, or never entered kvm_vcpu_halt (wake-up pending)
    assert (v["halt_successful_poll"] + v["halt_wakeup"] <= v["halt_exits"]).all()
    # the loop times itself with ktime: the time switched out counts as poll
    # time in the stats, but not as CPU time spent polling
    assert (v["halt_poll_success_ns"] + v["halt_poll_fail_ns"]).sum() > v["polling_ns"].sum()


def test_halt_polling_stops_when_another_task_wants_the_cpu():
    # 4 VMs x 2 vCPUs on 2 CPUs: polls are cut short by the other vCPUs
    busy = sim.run(pingpong(sim.HaltPoll(policy="fixed"), pcpus=2, count=4)).vcpus
    idle = sim.run(pingpong(sim.HaltPoll(policy="fixed"), pcpus=8, count=1)).vcpus
    per_poll_busy = busy["polling_ns"].sum() / max(1, busy["halt_attempted_poll"].sum())
    per_poll_idle = idle["polling_ns"].sum() / max(1, idle["halt_attempted_poll"].sum())
    assert per_poll_busy < per_poll_idle
    assert busy["halt_successful_poll"].sum() < busy["halt_attempted_poll"].sum()


def test_thread0_phases_and_kthreads_per_cpu_round_trip_and_are_omitted_at_their_defaults():
    """The twin options: absent from the JSON (and the hash) at their
    defaults, carried through Rust when set, bad values named."""
    plain = sim.Config()
    d = plain.to_dict()
    assert "thread0_phases" not in d["vms"][0]["workload"] and "kthreads_per_cpu" not in str(d)
    assert "kthreads_per_cpu" not in sim.Config(host=sim.Host(noise=sim.HostNoise(kthread_hz=10.0))).to_json()
    w = sim.Workload(
        phases=(sim.Recv(), sim.Compute(5_000), sim.Send(1)),
        thread0_phases=[sim.Compute(50_000), sim.Send(1), sim.Recv()],
    )
    cfg = sim.Config(
        host=sim.Host(n_pcpus=2, noise=sim.HostNoise(kthread_hz=1000.0, kthread_ns=20_000, kthreads_per_cpu=4)),
        vms=(sim.Vm(vcpus=2, workload=w),),
        duration_ns=5_000_000,
    )
    assert isinstance(cfg.vms[0].workload.thread0_phases, tuple)
    assert sim.Config.from_json(cfg.to_json()) == cfg
    assert cfg.config_hash() != replace(cfg, host=replace(cfg.host, noise=sim.HostNoise(1000.0, 20_000))).config_hash()
    r = sim.run(cfg)
    assert r.vms["ops"][0] > 0 and "lock_waits_open" in r.vms.columns
    with pytest.raises(ValueError, match="kthreads_per_cpu"):
        sim.HostNoise(kthreads_per_cpu=0)
    with pytest.raises(ValueError, match="thread0_phases"):
        sim.Workload(thread0_phases=(sim.Lock(0, "tas", 1000),))
    with pytest.raises(ValueError, match="thread0_phases"):
        sim.Workload(thread0_phases=(sim.Recv(),))
    with pytest.raises(ValueError, match="thread0_phases"):
        sim.run(sim.Config(vms=(sim.Vm(vcpus=1, workload=sim.Workload(thread0_phases=(sim.Compute(1000),))),)))
