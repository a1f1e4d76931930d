"""The simulator's decision log (``sim.Result.schedule``, src/sim/decisions.rs)
and its comparison with a real run's ``Run.schedule``
([`twins.token_holds`][vcpulab.twins.token_holds],
[`twins.compare_schedules`][vcpulab.twins.compare_schedules]).

The rules of each row (who gives a token to whom, for which reason) are
tested in src/sim/tokens_tests.rs; here: the frame a user gets, the holds
computed from a log, the comparison's arithmetic on logs whose answer is
known, its refusals, and one real run against its twin (structure only: the
rates and times move with this host's load)."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

from vcpulab import sched, sim, twins
from vcpulab.experiment import Run, WakePlacement


def _tokens_config(scheduler: str = "round_robin", trace: bool = True) -> sim.Config:
    """Three vCPUs on two CPUs computing and sleeping: slices, halts and wake-ups."""
    work = sim.Workload(phases=(sim.Compute(ns=200_000, dist="exp"), sim.Sleep(ns=300_000, dist="exp")))
    return sim.Config(
        host=sim.Host(n_pcpus=2, scheduler=scheduler),
        vms=(sim.Vm(vcpus=3, workload=work),),
        duration_ns=50_000_000,
        trace=trace,
    )


def test_a_token_schedulers_traced_run_logs_its_decisions_in_the_real_logs_columns() -> None:
    r = sim.run(_tokens_config())
    d = r.schedule
    assert d is not None and d.height > 100
    assert tuple(d.columns) == twins.SCHEDULE_COLUMNS
    assert d.schema["why"] == pl.Enum(list(sched.WHY))
    assert d["t_ns"].is_sorted()
    assert set(d["why"].cast(pl.String).unique()) <= {"start", "slice", "halt", "wake"}
    assert d.filter(pl.col("why") == "start").height == 2  # one first token per CPU
    # every grant is one of the vCPU's token_grants
    grants = d.filter(pl.col("in_vcpu") >= 0).group_by("in_vcpu").len().sort("in_vcpu")
    assert grants["len"].to_list() == r.vcpus.sort("vcpu")["token_grants"].to_list()
    # not traced, or not one of vcpulab's schedulers: no log, and the log changes no result
    quiet = sim.run(_tokens_config(trace=False))
    assert quiet.schedule is None
    assert quiet.vcpus.equals(r.vcpus)
    assert sim.run(_tokens_config("fair")).schedule is None
    # sched.summary reads the twin's log as a real run's
    s = sched.summary(r)
    assert s.decisions == d.height and s.by_why["halt"] == d.filter(pl.col("why") == "halt").height
    assert s.spin_exits == 0 and s.yield_latency_us == {}


def test_token_holds_of_a_known_log() -> None:
    ms = 1_000_000
    log = pl.DataFrame(
        dict(
            t_ns=[0, 0, 3 * ms, 4 * ms, 5 * ms, 6 * ms],
            pcpu=[0, 1, 0, 1, 0, 1],
            out_vm=[-1, -1, 0, 0, 0, -1],
            out_vcpu=[-1, -1, 0, 1, 2, -1],
            in_vm=[0, 0, 0, 0, -1, 0],
            in_vcpu=[0, 1, 2, 1, -1, 1],
            why=["start", "start", "halt", "watchdog", "slice", "wake"],
        )
    )
    h = twins.token_holds(log, end_ns=10 * ms)
    rows = sorted(h.select("vcpu", "pcpu", "start_ns", "held_ns", "why_in", "why_out").iter_rows())
    assert rows == [
        (0, 0, 0, 3 * ms, "start", "halt"),
        # the watchdog's kick ends nothing: vCPU 1 holds CPU 1 until the wake-up's row
        (1, 1, 0, 6 * ms, "start", "wake"),
        (1, 1, 6 * ms, 4 * ms, "wake", "end"),
        (2, 0, 3 * ms, 2 * ms, "halt", "slice"),
    ]
    # a hold the run's end cuts short is closed there
    assert twins.token_holds(log, end_ns=8 * ms).filter(pl.col("why_out") == "end")["held_ns"].to_list() == [2 * ms]
    # decisions after the run's end are not the run's: a real run's threads
    # hand their tokens on as each sees its deadline pass (logged "done")
    stop = pl.DataFrame(
        dict(t_ns=[10 * ms + 5, 10 * ms + 9], pcpu=[1, 1], out_vm=[0, 0], out_vcpu=[1, 0], in_vm=[0, -1])
        | dict(in_vcpu=[0, -1], why=["done", "done"])
    )
    after = twins.token_holds(pl.concat([log, stop]), end_ns=10 * ms)
    assert sorted(after.select("vcpu", "pcpu", "start_ns", "held_ns", "why_in", "why_out").iter_rows()) == rows
    with pytest.raises(ValueError, match="missing"):
        twins.token_holds(log.drop("why"), end_ns=ms)
    with pytest.raises(ValueError, match="end_ns"):
        twins.token_holds(log, end_ns=-1)


def _as_real(r: sim.Result) -> Run:
    """A real Run that carries a simulated run's log (the comparison's identity)."""
    empty = pl.DataFrame()
    wall_s = r.config.duration_ns / 1e9
    real = Run(samples=empty, results=empty, threads=empty, wall_s=wall_s, placement={}, config={"vcpus": 3})
    real.schedule = r.schedule.with_columns(pl.col("why").cast(pl.String))  # type: ignore[union-attr]
    return real


def test_a_log_compared_with_itself_agrees_on_every_row() -> None:
    r = sim.run(_tokens_config())
    for by in ("why_out", "why_in"):
        c = twins.compare_schedules(_as_real(r), r, by=by)
        assert c.height > 3
        assert c["n_real"].to_list() == c["n_sim"].to_list()
        assert np.allclose(c["ratio"].drop_nans().to_numpy(), 1.0)
        assert c["ks"].drop_nans().to_list() == [0.0] * c["ks"].drop_nans().len()
        # per vCPU, then every vCPU pooled per reason: the pooled rows sum the others
        per, pooled = c.filter(pl.col("vcpu") >= 0), c.filter(pl.col("vcpu") < 0)
        for row in pooled.iter_rows(named=True):
            assert row["n_real"] == per.filter(pl.col("why") == row["why"])["n_real"].sum()
    c, fig = twins.compare_schedules(_as_real(r), r, plot=True)
    # one panel per vCPU and reason with 20 holds on both sides (at most 6)
    busy = c.filter((pl.col("vcpu") >= 0) & (pl.col("n_real") >= 20)).height
    assert len(fig.axes) == min(busy, 6) and busy > 0
    import matplotlib.pyplot as plt

    plt.close(fig)
    halts = c.filter((pl.col("vcpu") == -1) & (pl.col("why") == "halt")).row(0, named=True)
    n = r.schedule.filter(pl.col("why") == "halt").height  # type: ignore[union-attr]
    assert halts["n_sim"] == n and halts["sim_per_s"] == pytest.approx(n / 0.05)


def test_a_real_runs_log_ends_at_its_deadline_as_the_twins_does() -> None:
    """A real run's threads stop one by one after its deadline, each handing
    its token on (``done`` rows past ``duration_s``); its twin's holds close
    at the run's end (``end``). Compared, both sides close their last holds
    as ``end`` and nothing is ``done``."""
    r = sim.run(_tokens_config())
    real = _as_real(r)
    end = r.config.duration_ns
    log = real.schedule
    assert log is not None
    last = log.sort("t_ns").filter(pl.col("in_vcpu") >= 0).tail(1).row(0, named=True)
    stop = pl.DataFrame(
        dict(t_ns=[end + 50_000], pcpu=[last["pcpu"]], out_vm=[0], out_vcpu=[last["in_vcpu"]])
        | dict(in_vm=[-1], in_vcpu=[-1], why=["done"]),
        schema=log.schema,
    )
    real.wall_s = end / 1e9 + 0.001
    real.config = {"vcpus": 3, "duration_s": end / 1e9}
    for late_ns in (50_000, -40_000):
        # after the deadline, or (the threads' clocks ahead of the log's) just before it
        real.schedule = pl.concat(
            [
                log.filter(pl.col("t_ns") < end + late_ns),
                stop.with_columns(t_ns=pl.lit(end + late_ns, log.schema["t_ns"])),
            ]
        )
        c = twins.compare_schedules(real, r)
        assert "done" not in c["why"].to_list()
        if late_ns > 0:
            assert c["n_real"].to_list() == c["n_sim"].to_list()


def test_compare_schedules_refuses_runs_without_a_log() -> None:
    r = sim.run(_tokens_config())
    with pytest.raises(ValueError, match="by must be"):
        twins.compare_schedules(_as_real(r), r, by="pcpu")
    with pytest.raises(ValueError, match="trace=True"):
        twins.compare_schedules(_as_real(r), sim.run(_tokens_config(trace=False)))
    empty = pl.DataFrame()
    unscheduled = Run(samples=empty, results=empty, threads=empty, wall_s=0.1, placement={}, config={"vcpus": 3})
    with pytest.raises(ValueError, match="scheduler"):
        twins.compare_schedules(unscheduled, r)


def test_a_real_scheduled_run_and_its_twin_log_the_same_kinds_of_decisions(
    kvm_host: Any, twin_calibration: Any
) -> None:
    """A WakePlacement under round_robin and its twin: both logs name every
    hand-off in the same columns and dtype, the waker (vCPU 0) and the
    chosen worker (vCPU 1) hold tokens until they halt on both sides. No
    rate or time is asserted: this host's load moves them."""
    exp = twins.Experiment(
        WakePlacement(rule="pcpu_is_idle", poll=0), 3, (0, 1), duration_s=0.2, scheduler=sched.round_robin()
    )
    reals, twin_runs = twins.run_both(exp, trials=1, seeds=1, cal=twin_calibration)
    real, twin = reals[0], twin_runs[0]
    assert real.schedule is not None and twin.schedule is not None
    assert real.schedule.schema["why"] == twin.schedule.schema["why"]
    c = twins.compare_schedules(real, twin)
    for v in (0, 1):
        row = c.filter((pl.col("vcpu") == v) & (pl.col("why") == "halt"))
        assert row.height == 1 and row["n_real"][0] > 0 and row["n_sim"][0] > 0, c


def test_every_vcpu_of_a_directed_yield_twin_gets_tokens_as_on_the_real_scheduler() -> None:
    """The twin's policy sees the real scheduler's view (src/kvm/sched/spin.rs):
    a vCPU queued before its first token is not blocking, so it is a
    candidate. Before 0.3.31 the simulated vCPU counted as halted until it
    first ran: under ``upstream`` on one CPU two vCPUs handed the token to
    each other by yields (each a fresh slice, so no slice ever ended) and the
    third never ran after the start in any seed, where the real run's three
    vCPUs yield alike (the decision logs: twin 876/876/0 yields/s, real
    ~520 each). ``oracle`` is left out: it yields only to the vCPU the
    spinner waits for, so a vCPU without a ticket is never its candidate and
    two vCPUs hand the token back and forth for the whole run, on the real
    scheduler too (every real trial of docs/twins.md item 14 starved one)."""
    cal = twins.reference_calibration()
    for exp in twins.policy_grid(pcpu=0):
        if exp.scheduler is None or exp.scheduler.name != "directed_yield" or "oracle" in twins.cell_name(exp):
            continue
        for seed in range(3):
            r = sim.run(twins.twin(exp, cal, seed=seed, trace=True))
            grants = r.vcpus["token_grants"].to_list()
            assert min(grants) >= 0.2 * np.mean(grants), (twins.cell_name(exp), seed, grants)
            # every successful yield_to is one `yield` row of the log
            s = sched.summary(r)
            assert s.yields_successful == s.by_why["yield"] and s.spin_exits >= s.yields_attempted
            assert (s.yields_successful > 0) == ("no_yield" not in twins.cell_name(exp))


def test_the_calibration_reads_how_late_slices_end_and_the_twin_takes_it() -> None:
    from vcpulab.twins._calibration import _slice_exit_of

    us = 1_000
    # one CPU, two vCPUs: holds of 4 ms plus 20, 30, ... µs
    late = [20 + 10 * (i % 5) for i in range(20)]
    t, rows = 0, []
    for i, lt in enumerate(late):
        rows.append(
            dict(
                t_ns=t,
                pcpu=0,
                out_vm=0 if i else -1,
                out_vcpu=(i + 1) % 2 if i else -1,
                in_vm=0,
                in_vcpu=i % 2,
                why="slice" if i else "start",
            )
        )
        t += 4_000 * us + lt * us
    log = pl.DataFrame(rows)
    empty = pl.DataFrame()
    r = Run(
        samples=empty,
        results=empty,
        threads=empty,
        wall_s=t / 1e9,
        placement={},
        config={"vcpus": 2, "scheduler": sched.round_robin().config()},
    )
    r.schedule = log
    median, spread, how = _slice_exit_of(r)
    # the last hold is cut by the run's end: 19 whole holds late by 20-60 µs
    assert median == pytest.approx(np.median(late[:-1]) * us)
    assert spread > 0 and "19 slice ends" in how
    r.schedule = log.head(5)
    assert _slice_exit_of(r)[0] == 0.0
    # the twin of a scheduled run takes the calibration's value; without it, exact slices
    cal = twins.reference_calibration()
    exp = twins.Experiment(WakePlacement(), 3, (0, 1), scheduler=sched.round_robin())
    assert twins.twin(exp, cal).host.token_slice_exit_ns == 0
    import dataclasses

    vals = {
        **cal.values,
        "token_slice_exit_ns": twins.Value(40_000.0, "ns", "test"),
        "token_slice_exit_spread": twins.Value(0.2, "", "test"),
    }
    h = twins.twin(exp, dataclasses.replace(cal, values=vals)).host
    assert (h.token_slice_exit_ns, h.token_slice_exit_jitter) == (40_000, pytest.approx(0.2))
    assert h.token_slice_exit_cpu_spread == 0.0
    vals["token_slice_exit_cpu_spread"] = twins.Value(0.25, "", "test")
    assert twins.twin(exp, dataclasses.replace(cal, values=vals)).host.token_slice_exit_cpu_spread == 0.25


def test_the_calibration_measures_how_the_cpus_own_slice_lateness_differs(kvm_host: Any) -> None:
    """Real runs of 3 vCPUs on 2 CPUs under round_robin: one spread from
    the per-CPU median lateness of each run's slice ends (a number, not a
    value: this host's load moves it)."""
    from vcpulab._core import allowed_cpus
    from vcpulab.twins._calibration import _slice_exit_cpu_spread

    cpus = sorted(allowed_cpus())
    v = _slice_exit_cpu_spread(cpus)["token_slice_exit_cpu_spread"]
    if len(cpus) < 2:
        assert v.value == 0.0 and "one usable CPU" in v.how
        return
    assert 0.0 <= v.value < 2.0 and f"{len(cpus) + 1} vCPUs" in v.how, v
    assert _slice_exit_cpu_spread(cpus[:1])["token_slice_exit_cpu_spread"].value == 0.0


def test_ranked_vcpus_compare_runs_in_which_different_vcpus_starve() -> None:
    """Under ``oracle`` one vCPU of three starves for the whole run, a
    different one in different seeds (docs/twins.md item 14): by index the
    two seeds disagree on every vCPU, by rank they agree."""
    cal = twins.reference_calibration()
    exp = next(e for e in twins.policy_grid(pcpu=0) if "oracle" in twins.cell_name(e))
    runs = [sim.run(twins.twin(exp, cal, seed=s, trace=True)) for s in range(3)]
    grants = [r.vcpus["token_grants"].to_list() for r in runs]
    starved = [int(np.argmin(g)) for g in grants]
    assert all(min(g) <= 2 for g in grants) and len(set(starved)) > 1, grants
    a, b = next((runs[i], runs[j]) for i in range(3) for j in range(3) if starved[i] != starved[j])
    yields = pl.col("why") == "yield"
    by_index = twins.compare_schedules(_as_real(a), b).filter((pl.col("vcpu") >= 0) & yields)
    by_rank = twins.compare_schedules(_as_real(a), b, rank=True).filter((pl.col("vcpu") >= 0) & yields)
    assert by_index.height == 3 and not np.allclose(by_index["ratio"].fill_nan(0.0).to_numpy(), 1.0, rtol=0.2)
    assert by_rank["vcpu"].to_list() == [0, 1]
    assert np.allclose(by_rank["ratio"].to_numpy(), 1.0, rtol=0.1)
    with pytest.raises(TypeError):
        twins.compare_schedules(_as_real(a), b, rank="yes")
