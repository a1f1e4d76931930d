"""vcpulab.validation.sensitivity: the validation cases re-run with one
unpublished value (an era's or cost profile's assumption) scaled at a time.

The halt-polling cases run on the one-CPU model (milliseconds); the one
main-engine case runs a few simulated milliseconds. The whole table is
benches/validation_sensitivity.py.
"""

from __future__ import annotations

import math

import polars as pl
import pytest

from vcpulab import validation as V
from vcpulab.validation import sensitivity as S

HP_CASE = "haltpoll2015_always_vs_off_tcp_rr"


def test_assumptions_are_the_unpublished_magnitudes_a_case_may_read():
    a = S.assumptions("ple2012_sysbench_1x")
    assert a["cost.host.rq_lock_ns"].value == 300
    assert a["era.host.wakeup_ipi_ns"].unit == "ns"
    assert all(p.kind in ("assumption", "fitted") for p in a.values())
    # a fitted value is as unpublished as an assumption: it is scaled too
    hp_a = S.assumptions("haltpoll2015_always_vs_off_tcp_rr")
    assert hp_a["cost.halt_poll_model.wake_latency_ns"].kind == "fitted"
    assert hp_a["cost.halt_poll_model.deliver_ns"].kind == "assumption"
    # choices between mechanisms (booleans, names) are not magnitudes
    assert "era.host.seeded_ties" not in a and "era.host.start_placement" not in a
    # kernel defaults and cited hardware figures are not assumptions
    assert "era.host.tick_ns" not in a and "era.ple.window" not in a


def test_a_value_the_case_overrides_with_a_reason_is_the_published_setup_not_an_assumption():
    c = next(c for c in V.CASES if c.overrides and c.build is not None)
    a = S.assumptions(c)
    for path in c.overrides:
        assert f"era.{path}" not in a


def test_a_scaled_cost_reruns_the_case_and_keeps_the_nominal_table():
    df = S.sensitivity([HP_CASE], params=["cost.halt_poll_model.deliver_ns"], factors=(0.5, 2.0), seeds=2)
    nominal = V.validate([HP_CASE], seeds=2)
    assert df.height == 2 and df["status"].to_list() == ["ran", "ran"]
    assert df["factor"].to_list() == [0.5, 2.0]
    assert df["nominal_value"].to_list() == ["1000 ns", "1000 ns"]
    assert df["value"].to_list() == ["500 ns", "2000 ns"]
    assert math.isclose(df["nominal_mean"][0], nominal["sim_mean"][0], rel_tol=1e-12)
    assert df["nominal_direction_ok"][0] == nominal["direction_ok"][0]
    for r in df.iter_rows(named=True):
        assert len(r["per_seed"]) == 2 and math.isfinite(r["sim_mean"])
        assert r["ci_low"] <= r["sim_mean"] <= r["ci_high"]
    # the same case with the scaled profile run through validate gives the same mean
    prof = S._scaled_profile(V.COSTS["hardware"], "halt_poll_model.deliver_ns", 2000, 2.0)
    again = V.validate([HP_CASE], seeds=2, costs=prof)
    assert math.isclose(df["sim_mean"][1], again["sim_mean"][0], rel_tol=1e-12)


def test_the_run_length_is_scaled_like_an_assumption():
    df = S.sensitivity([HP_CASE], params=[S.RUN_LENGTH], factors=(2.0,), seeds=1, duration_scale=0.5)
    assert df["param"].to_list() == ["run.length"] and df["value"].to_list() == ["2.0 x the case's window"]
    longer = V.validate([HP_CASE], seeds=1, duration_scale=1.0)
    assert math.isclose(df["sim_mean"][0], longer["sim_mean"][0], rel_tol=1e-12)


def test_a_value_the_case_never_reads_gives_no_row():
    # the one-CPU halt-polling model has no run queues: yield_to's lock cost changes nothing
    df = S.sensitivity([HP_CASE], params=["cost.host.rq_lock_ns"], seeds=1)
    assert df.height == 0 and "sim_mean" in df.columns


def test_a_scaled_value_the_simulator_refuses_is_reported_not_run():
    df = S.sensitivity(
        ["ple2012_yield_success_share_1x"],
        params=["era.host.wakeup_jitter"],
        factors=(4.0,),
        seeds=1,
        duration_scale=0.02,
    )
    assert df.height == 1
    r = df.row(0, named=True)
    assert r["status"].startswith("refused: ") and "wakeup_jitter" in r["status"]
    assert r["sim_mean"] is None and r["value"] == "2.0"


@pytest.mark.parametrize("factor", [1e4, 1e308])
def test_every_scaled_value_the_model_cannot_take_is_a_refused_row(factor):
    # a noise rate past its bound (ValueError in HostNoise), a product that
    # overflows an int (OverflowError) and a window too long to simulate are
    # rows with their reason, never an exception that loses the table
    df = S.sensitivity(["ple2012_ebizzy_1x"], factors=[factor], seeds=1, duration_scale=0.1)
    refused = {r["param"]: r["status"] for r in df.iter_rows(named=True) if r["status"] != "ran"}
    assert "HostNoise.kthread_hz" in refused["era.host.noise"]
    assert "more than 16x" in refused["run.length"]
    assert all(s.startswith("refused: ") for s in refused.values())
    assert df.filter(pl.col("status") != "ran")["sim_mean"].null_count() == len(refused)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"factors": (1.0,)}, "factors"),
        ({"factors": (0.0,)}, "factors"),
        ({"factors": (-2.0,)}, "factors"),
        ({"factors": (math.inf,)}, "factors"),
        ({"factors": ()}, "factors"),
        ({"params": ["cost.host.no_such_ns"]}, "not assumptions"),
        ({"params": ["era.host.tick_ns"]}, "not assumptions"),
    ],
)
def test_bad_input_names_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        S.sensitivity([HP_CASE], seeds=1, **kwargs)


def test_cases_without_a_builder_cannot_be_rerun():
    with pytest.raises(ValueError, match="expressible"):
        S.sensitivity(["vcpu_is_preempted2017_fio"], seeds=1)
    with pytest.raises(ValueError, match="unknown case"):
        S.sensitivity(["no_such_case"], seeds=1)


def _frame(rows):
    base = {c: None for c in S._SCHEMA}
    return pl.DataFrame([{**base, **r} for r in rows], schema=S._SCHEMA, orient="row")


def test_per_case_names_what_mends_a_miss_and_what_breaks_a_match():
    common = {"era": "2012-3.x", "metric": "throughput_change", "status": "ran", "published": 0.1}
    df = _frame(
        [
            {
                **common,
                "case": "a",
                "param": "cost.host.rq_lock_ns",
                "factor": 0.5,
                "nominal_mean": -0.1,
                "sim_mean": 0.05,
                "nominal_direction_ok": False,
                "direction_ok": True,
                "nominal_within_2x": False,
                "within_2x": True,
                "beyond_seeds": True,
            },
            {
                **common,
                "case": "a",
                "param": "cost.host.rq_lock_ns",
                "factor": 2.0,
                "nominal_mean": -0.1,
                "sim_mean": -0.3,
                "nominal_direction_ok": False,
                "direction_ok": False,
                "nominal_within_2x": False,
                "within_2x": False,
                "beyond_seeds": True,
            },
            {
                **common,
                "case": "b",
                "param": "era.host.wakeup_ipi_ns",
                "factor": 2.0,
                "nominal_mean": 0.1,
                "sim_mean": -0.2,
                "nominal_direction_ok": True,
                "direction_ok": False,
                "nominal_within_2x": True,
                "within_2x": False,
                "beyond_seeds": True,
            },
            {
                **common,
                "case": "b",
                "param": "cost.pv.hypercall_ns",
                "factor": 0.5,
                "nominal_mean": 0.1,
                "sim_mean": -0.01,
                "nominal_direction_ok": True,
                "direction_ok": False,
                "nominal_within_2x": True,
                "within_2x": False,
                "beyond_seeds": False,
            },
            {
                **common,
                "case": "b",
                "param": "era.host.wakeup_jitter",
                "factor": 4.0,
                "status": "refused: x",
                "nominal_mean": 0.1,
                "nominal_direction_ok": True,
                "nominal_within_2x": True,
            },
        ]
    )
    pc = {r["case"]: r for r in S.per_case(df).iter_rows(named=True)}
    assert pc["a"]["mends_direction"] == ["cost.host.rq_lock_ns x0.5"] and pc["a"]["breaks_direction"] == []
    assert pc["a"]["mends_within_2x"] == ["cost.host.rq_lock_ns x0.5"]
    assert (pc["a"]["min_mean"], pc["a"]["max_mean"]) == (-0.3, 0.05)
    # the hypercall flip lies within the seeds' spread: counted, not named
    assert pc["b"]["breaks_direction"] == ["era.host.wakeup_ipi_ns x2"] and pc["b"]["mends_direction"] == []
    assert pc["a"]["within_seeds"] == 0 and pc["b"]["within_seeds"] == 1
    assert pc["b"]["scaled"] == 3  # the refused run is counted, not scored
    assert S.changes(df)["case"].to_list() == ["a", "b", "b"]
    md = S.to_markdown(df)
    assert "| a | +10.0% | -10.0% | -30.0% … +5.0% | **no** | `cost.host.rq_lock_ns x0.5` | none |" in md
    assert md.splitlines()[-1].endswith("| `era.host.wakeup_ipi_ns x2` | 1 |")
