"""The simulated halt-polling model ([K3], [S5]): the
kernel's grow/shrink sequences, the stats, the policies' behaviour, and the
idle-overhead story of [S5] (docs/sources.md)."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vcpulab import sim
from vcpulab.sim import halt_poll as hp


def test_grow_sequence_and_clamp_follow_the_kernel() -> None:
    p = sim.HaltPoll(policy="block-time", max_ns=200_000, grow=2, grow_start_ns=10_000, shrink=2)
    # halts of 190 µs: each misses the window and is shorter than the max → grow
    w = hp.windows(p, [(190_000, False)] * 8)
    assert w == [0, 10_000, 20_000, 40_000, 80_000, 160_000, 200_000, 200_000]


def test_shrink_sequence_follows_the_kernel() -> None:
    p = sim.HaltPoll(policy="block-time", max_ns=200_000, grow=2, grow_start_ns=10_000, shrink=2)
    # grow to the max with short halts, then long halts shrink: ÷2 until < grow_start → 0
    w = hp.windows(p, [(190_000, False)] * 7 + [(1_000_000, False)] * 6)
    assert w[7:] == [200_000, 100_000, 50_000, 25_000, 12_500, 0]
    p0 = sim.HaltPoll(policy="block-time", max_ns=200_000, shrink=0)
    assert hp.windows(p0, [(190_000, False)] * 7 + [(1_000_000, False)] * 2)[7:] == [200_000, 0]


def test_policies_off_fixed_v4() -> None:
    assert set(hp.windows(sim.HaltPoll(policy="off", max_ns=200_000), [(20_000, True)] * 5)) == {0}
    assert set(hp.windows(sim.HaltPoll(policy="fixed", max_ns=50_000), [(4_000_000, False)] * 5)) == {50_000}
    v4 = sim.HaltPoll(policy="dynamic-v4", max_ns=200_000, v4_start_ns=0)
    # v4 from 0: no interrupt can arrive while polling, so it never grows
    assert set(hp.windows(v4, [(20_000, False)] * 20)) == {0}


@settings(max_examples=60, deadline=None)
@given(
    halts=st.lists(st.tuples(st.integers(0, 3_000_000), st.booleans()), min_size=1, max_size=60),
    mx=st.integers(0, 2_000_000),
    policy=st.sampled_from(hp.POLICIES),
)
def test_window_never_exceeds_the_max_and_is_zero_or_at_least_grow_start(halts, mx, policy) -> None:  # type: ignore[no-untyped-def]
    w = hp.windows(sim.HaltPoll(policy=policy, max_ns=mx, grow_start_ns=10_000), halts)
    assert all(0 <= x <= mx for x in w)
    if policy == "block-time":
        assert all(x == 0 or x >= min(10_000, mx) for x in w)


def _msg(policy: str, mx: int, gap_us: int, rounds: int = 600, **kw) -> hp.Result:  # type: ignore[no-untyped-def]
    return hp.run(
        hp.Scenario(sim.HaltPoll(policy=policy, vm_max_ns=mx), vcpus=(hp.Message(gap_us * 1000),), rounds=rounds, **kw)
    )


def test_stats_line_up_with_the_kernel_names_and_are_consistent() -> None:
    r = _msg("block-time", 200_000, 50)
    s = r.stats.row(0, named=True)
    for c in hp.STAT_COLUMNS:
        assert c in r.stats.columns
    assert s["halt_exits"] == 600
    assert s["halt_successful_poll"] <= s["halt_attempted_poll"] <= s["halt_exits"]
    # every halt either polled successfully or was woken from sleep
    assert s["halt_successful_poll"] + s["halt_wakeup"] == s["halt_exits"]
    assert s["poll_cpu_ns"] == s["halt_poll_success_ns"] + s["halt_poll_fail_ns"]
    assert s["success_frac"] > 0.98
    r0 = _msg("block-time", 0, 50)
    s0 = r0.stats.row(0, named=True)
    assert s0["halt_attempted_poll"] == 0 and s0["halt_wakeup"] == s0["halt_exits"]
    # a blocked wake-up is slower by the wake-up latency
    c = hp.Costs()
    assert s0["rtt_median_us"] - s["rtt_median_us"] == pytest.approx(
        (c.wake_latency_ns - c.poll_detect_ns) / 1e3, abs=0.5
    )


def test_long_gaps_block_time_shrinks_to_zero() -> None:
    s = _msg("block-time", 200_000, 1000, rounds=200).stats.row(0, named=True)
    assert s["halt_successful_poll"] == 0 and s["final_halt_poll_ns"] == 0 and s["poll_cpu_ns"] == 0


def test_deterministic_and_seeded() -> None:
    sc = hp.Scenario(
        sim.HaltPoll(policy="block-time", vm_max_ns=200_000),
        vcpus=(hp.Message(50_000, exponential=True),),
        costs=hp.Costs(wake_jitter_ns=5_000),
        background=hp.Background.from_fraction(0.3),
        rounds=500,
        seed=7,
        trace=True,
    )
    a, b = hp.run(sc), hp.run(sc)
    assert a.stats.equals(b.stats) and a.trace is not None and a.trace.equals(b.trace)  # type: ignore[arg-type]
    assert a.trace.height == a.stats["halt_exits"][0]
    c = hp.run(hp.Scenario(**{**sc.__dict__, "seed": 8}))
    assert not a.stats.equals(c.stats)


def test_background_load_stops_polling() -> None:
    alone = _msg("block-time", 200_000, 20, rounds=1000).stats["success_frac"][0]
    half = _msg("block-time", 200_000, 20, rounds=1000, background=hp.Background.from_fraction(0.5, 2_000_000)).stats
    full = _msg("block-time", 200_000, 20, rounds=1000, background=hp.Background.from_fraction(1.0)).stats
    print(alone, half["success_frac"][0], full["success_frac"][0])
    assert alone > 0.98
    assert 0.2 < half["success_frac"][0] < 0.8
    assert full["success_frac"][0] < 0.05


@pytest.mark.parametrize(
    "bad, field",
    [
        (lambda: sim.HaltPoll(policy="sometimes"), "policy"),
        (lambda: sim.HaltPoll(policy="block-time", max_ns=-1), "max_ns"),
        (lambda: sim.HaltPoll(policy="block-time", vm_max_ns=2**40), "vm_max_ns"),
        (lambda: sim.HaltPoll(policy="block-time", grow=1.5), "grow"),
        (lambda: hp.Message(gap_ns=-5), "gap_ns"),
        (lambda: hp.Timer(hz=0), "hz"),
        (lambda: hp.Costs(wake_latency_ns=-1), "wake_latency_ns"),
        (lambda: hp.Scenario(rounds=0), "duration_ns"),
        (lambda: hp.Scenario(vcpus=(hp.Timer(),), rounds=10), "duration_ns"),
        (lambda: hp.Scenario(vcpus=()), "vcpus"),
        (lambda: hp.Background(busy_ns=0), "busy_ns"),
        (lambda: hp.Background.from_fraction(1.5), "busy_fraction"),
        (lambda: hp.windows(sim.HaltPoll(policy="block-time"), [(-1, True)]), "halts[0]"),
    ],
)
def test_bad_input_raises_value_error_naming_the_field(bad, field) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=field.replace("[", r"\[")):
        bad()


def test_rust_side_rejects_bad_json_with_value_error() -> None:
    from vcpulab import _core

    with pytest.raises(ValueError, match="halt-poll scenario"):
        _core.halt_poll_simulate('{"halt_poll": {"policy": "nope"}, "vcpus": []}')  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="rounds"):
        _core.halt_poll_simulate('{"halt_poll": {"policy": "off"}, "vcpus": [{"kind": "timer", "hz": 10}]}')  # type: ignore[attr-defined]


def test_host_params_are_read_from_sysfs_or_default(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "halt_poll_ns").write_text("123456\n")
    p = hp.host_params(tmp_path)
    assert p["halt_poll_ns"] == 123456 and p["halt_poll_ns_shrink"] == 2
    assert hp.host_params.sources["halt_poll_ns"].startswith("host")  # type: ignore[attr-defined]
    assert hp.host_params.sources["halt_poll_ns_grow"] == "kernel default"  # type: ignore[attr-defined]


# ----------------------------------------------------------- [S5] story


@pytest.fixture(scope="module")
def study() -> pl.DataFrame:
    t = hp.idle_study(max_poll_ns=200_000)
    with pl.Config(tbl_rows=64, tbl_cols=12, tbl_width_chars=200):
        print(
            t.select(
                "workload",
                "policy",
                "poll_cpu_frac",
                "busy_frac",
                "success_frac",
                "wake_latency_mean_us",
                "mean_window_ns",
            )
        )
    return t


def _cell(t: pl.DataFrame, workload: str, policy: str, col: str) -> float:
    return float(t.filter((pl.col("workload") == workload) & (pl.col("policy") == policy))[col][0])


@pytest.mark.parametrize("hz", [250, 1000])
def test_idle_guest_v4_keeps_polling_block_time_shrinks_to_zero(study: pl.DataFrame, hz: int) -> None:
    w = f"idle {hz} Hz"
    off, bt = _cell(study, w, "off", "poll_cpu_frac"), _cell(study, w, "block-time", "poll_cpu_frac")
    fx, v4 = _cell(study, w, "fixed", "poll_cpu_frac"), _cell(study, w, "dynamic-v4", "poll_cpu_frac")
    assert off == 0.0
    assert bt < 0.001  # ≈ off
    assert v4 > 10 * max(bt, 0.001)  # well above off
    assert off <= bt < fx
    assert _cell(study, w, "block-time", "busy_frac") == pytest.approx(_cell(study, w, "off", "busy_frac"), abs=0.002)


@pytest.mark.parametrize("gap_us", [10, 20, 50])
def test_short_gaps_v4_at_the_max_block_time_near_the_gap(study: pl.DataFrame, gap_us: int) -> None:
    w = f"message {gap_us} us"
    assert _cell(study, w, "dynamic-v4", "mean_window_ns") > 0.99 * 200_000
    bt = _cell(study, w, "block-time", "mean_window_ns")
    # the halt is the gap plus a few µs of delivery minus the cue-to-HLT time
    assert 0.5 * gap_us * 1000 <= bt <= 4 * gap_us * 1000, bt
    # both catch (nearly) every wake-up; block-time's is as fast as v4's
    assert _cell(study, w, "block-time", "success_frac") > 0.99
    assert _cell(study, w, "block-time", "wake_latency_mean_us") < 0.1 * _cell(study, w, "off", "wake_latency_mean_us")


def test_two_ms_max_reproduces_the_250hz_comparison() -> None:
    t = hp.idle_study(max_poll_ns=2_000_000, idle_hz=(250,), gaps_ns=())
    c0 = {p: _cell(t, "idle 250 Hz", p, "busy_frac") for p in hp.POLICIES}
    print("C0-like busy fraction, 250 Hz, 2 ms max:", c0)
    assert c0["dynamic-v4"] > 10 * c0["off"]
    assert c0["block-time"] == pytest.approx(c0["off"], abs=0.002)


def test_v4_shrinks_on_a_truly_idle_guest_but_fixed_does_not() -> None:
    """A 50 Hz guest halts 20 ms at a time, longer than v4's idle threshold
    (10 ms): v4 shrinks to 0 within a few ticks and then never grows again."""
    t = hp.idle_study(max_poll_ns=200_000, idle_hz=(50,), gaps_ns=())
    v4 = _cell(t, "idle 50 Hz", "dynamic-v4", "poll_cpu_frac")
    fx = _cell(t, "idle 50 Hz", "fixed", "poll_cpu_frac")
    print(f"50 Hz: v4 polls {v4:.5f} of the time, fixed {fx:.5f}")
    assert _cell(t, "idle 50 Hz", "dynamic-v4", "final_halt_poll_ns") == 0
    assert v4 < fx / 5
