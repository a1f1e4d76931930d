"""Property tests: over random configurations, no panic reaches Python and
time is conserved exactly."""

from __future__ import annotations

import json

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vcpulab import _core, sim
from vcpulab.sim import policies as P

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

dists = st.sampled_from(["fixed", "exp", "uniform"])
probs = st.sampled_from([1.0, 0.5, 0.1])


def phases(vcpus: int, threads: int):
    return st.one_of(
        st.builds(sim.Compute, st.integers(0, 50_000), dists, st.sampled_from(["user", "kernel"]), probs),
        st.builds(
            sim.Lock,
            st.integers(0, 2),
            st.just("ticket"),  # the kind is fixed per lock id below
            st.integers(0, 20_000),
            dists,
            probs,
        ),
        st.builds(sim.Ipi, st.integers(0, max(0, vcpus - 1)), st.integers(0, 5_000), probs),
        st.just(sim.Barrier()),
        st.builds(sim.Sleep, st.integers(0, 50_000), dists, probs),
        st.builds(sim.Send, st.integers(1, max(1, threads - 1)), probs),
    )


@st.composite
def vms(draw):
    vcpus = draw(st.integers(1, 6))
    threads = draw(st.integers(0, 2 * vcpus))
    nthreads = threads or vcpus
    ph = draw(st.lists(phases(vcpus, nthreads), min_size=0, max_size=5))
    if nthreads < 2:
        ph = [p for p in ph if not isinstance(p, sim.Send)]
    kinds = draw(st.lists(st.sampled_from(["tas", "ticket", "queued", "pv_queued", "mutex"]), min_size=3, max_size=3))
    ph = [sim.Lock(p.lock, kinds[p.lock], p.hold_ns, p.dist, p.prob) if isinstance(p, sim.Lock) else p for p in ph]
    if any(isinstance(p, sim.Send) for p in ph) and draw(st.booleans()):
        ph.append(sim.Recv())
    ph.append(sim.Compute(draw(st.integers(1, 30_000)), draw(dists)))
    ph = draw(st.permutations(ph))
    ple = draw(
        st.one_of(
            st.builds(
                sim.Ple, st.booleans(), st.just("vmx"), st.integers(1, 20_000), st.integers(0, 3), st.integers(0, 3)
            ),
            st.just(sim.Ple.svm()),
            st.just(sim.Ple.fixed()),
        )
    )
    policy = draw(
        st.sampled_from(
            [
                P.upstream(),
                P.upstream(last_boosted_bug=True),
                P.baseline_2011(),
                P.dy_eligible(),
                P.random(),
                P.oracle(),
                P.no_yield(),
            ]
        )
    )
    pv = sim.Pv(
        steal_time=draw(st.booleans()),
        sched_yield=draw(st.booleans()),
        apicv=draw(st.booleans()),
        placement=draw(st.sampled_from(["available_idle", "pcpu_is_idle"])),
        guest_idle_poll_ns=draw(st.sampled_from([0, 10_000])),
    )
    return sim.Vm(
        vcpus=vcpus,
        count=draw(st.integers(1, 2)),
        threads=threads,
        workload=sim.Workload(phases=tuple(ph), iterations=draw(st.sampled_from([0, 0, 3]))),
        ple=ple,
        policy=policy,
        pv=pv,
        halt_poll=sim.HaltPoll(
            policy=draw(st.sampled_from(["off", "fixed", "block-time", "dynamic-v3", "dynamic-v4"])),
            max_ns=draw(st.sampled_from([0, 50_000, 200_000])),
            shrink=draw(st.sampled_from([0, 2])),
            poll_allowed=draw(st.booleans()),
        ),
    )


@st.composite
def configs(draw):
    host = sim.Host(
        n_pcpus=draw(st.integers(1, 6)),
        scheduler=draw(st.sampled_from(["fair", "fair", "gang"])),
        affinity=draw(st.sampled_from(["pinned", "round_robin", "all"])),
        next_buddy=draw(st.sampled_from(["always", "eligible", "never"])),
        yield_penalty=draw(st.sampled_from(["vruntime", "deadline"])),
        wakeup_preemption=draw(st.booleans()),
        yield_to_esrch=draw(st.booleans()),
        tick_ns=draw(st.sampled_from([1_000_000, 4_000_000])),
        background=sim.Background(draw(st.sampled_from([0.0, 0.0, 0.2, 0.6]))),
    )
    return sim.Config(
        host=host,
        vms=tuple(draw(st.lists(vms(), min_size=1, max_size=3))),
        duration_ns=draw(st.integers(1, 3_000_000)),
        seed=draw(st.integers(0, 2**64 - 1)),
        trace=draw(st.booleans()),
    )


@SETTINGS
@given(configs())
def test_conservation_always_holds(cfg):
    r = sim.run(cfg)
    d = r.summary["duration_ns"][0]
    assert d <= cfg.duration_ns
    cats = ["useful_ns", "spin_ns", "ple_ns", "exit_ns", "idle_poll_ns", "polling_ns", "bg_ns", "idle_ns"]
    assert (r.pcpus.select(pl.sum_horizontal(cats)).to_series() == d).all()
    v = r.vcpus
    assert ((v["running_ns"] + v["wait_ns"] + v["halted_ns"]) == d).all()
    assert (
        r.summary["yield_attempts"] == r.summary["yield_ok"] + r.summary["yield_esrch"] + r.summary["yield_zero"]
    ).all()
    if cfg.trace:
        t = r.trace
        assert (t["end_ns"] >= t["start_ns"]).all() and (t["end_ns"] <= d).all()


@SETTINGS
@given(configs())
def test_runs_are_deterministic(cfg):
    a, b = sim.run(cfg), sim.run(cfg)
    assert a.vcpus.equals(b.vcpus) and a.summary.equals(b.summary)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)


@SETTINGS
@given(st.data())
def test_no_panic_reaches_python_from_arbitrary_json(data):
    d = sim.Config(duration_ns=200_000).to_dict()
    # mutate one field somewhere to an arbitrary JSON value
    path = data.draw(
        st.sampled_from(
            [
                ("host", "pcpus"),
                ("host", "tick_ns"),
                ("host", "background", "utilization"),
                ("vms", 0, "vcpus"),
                ("vms", 0, "threads"),
                ("vms", 0, "ple", "window"),
                ("vms", 0, "ple", "max"),
                ("vms", 0, "policy", "kind"),
                ("vms", 0, "workload", "phases", 0, "ns"),
                ("vms", 0, "workload", "phases", 1, "lock"),
                ("vms", 0, "workload", "phases"),
                ("duration_ns",),
                ("seed",),
            ]
        )
    )
    target = d
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = data.draw(json_values)
    try:
        _core.sim_run(json.dumps(d))
    except ValueError:
        pass  # named, expected
    except OverflowError:
        pass  # json ints beyond 64 bits rejected by the parser
