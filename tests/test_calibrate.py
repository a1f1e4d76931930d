"""Calibration of the halt-polling model against real KVM on this host
(the issue's "what it must show"): for gaps {20, 50, 100, 300, 1000} µs ×
max poll {0, 50000, 200000} ns the simulated successful-poll fraction is within
15 points of real KVM's in ≥ 80 % of the informative cells, and two
calibrations agree within 10 points per cell.

Only cells whose outcome is determined are compared: a bistable cell (the
halt's block time straddles the maximum, ``calibrate.classify``) is set by
history and noise — a fresh clone once failed on 20 µs × 50 000 ns with real
0.18 then 0.78 — and a cell that stayed disturbed after its re-measurements
(``disturbed``) is left out; when no informative cell was left undisturbed the
test skips naming the measured disturbance."""

from __future__ import annotations

import math

import polars as pl
import pytest

from vcpulab import calibrate, sim
from vcpulab.kvm import Host
from vcpulab.sim import halt_poll as hp

ROUNDS = 200
#: pairs of calibrations made at most (each cell is already re-measured up to
#: twice when disturbed, calibrate.halt_poll's ``retries``). Three since
#: 2026-12-07: in a fresh-clone CI on the Intel host both of two pairs missed
#: on the 100 µs × 200 µs cell alone, undisturbed by the quality record (other
#: tasks 0.06-0.2 %), real 0.886 / 0.958 and 0.990 / 0.865 (a host whose
#: wake-ups come late in stretches: each late one halves KVM's window), while
#: six pairs made minutes later agreed at once
TRIES = 3


def _comparable(a: calibrate.HaltPollCalibration, b: calibrate.HaltPollCalibration) -> pl.DataFrame:
    """Cells of both calibrations that are neither bistable nor disturbed in either."""
    keys = ["gap_us", "max_poll_ns"]
    cols = ["cell_class", "real_success_frac", "sim_success_frac", "busy_fraction", "other_share", "disturbed"]
    j = a.frame.select(keys + cols).join(b.frame.select(keys + cols), on=keys, suffix="_2")
    return j.filter((pl.col("cell_class") != "bistable") & ~pl.col("disturbed") & ~pl.col("disturbed_2"))


def _reproducible(a: calibrate.HaltPollCalibration, b: calibrate.HaltPollCalibration) -> tuple[bool, pl.DataFrame]:
    j = _comparable(a, b)
    ok = True
    for side in ("real", "sim"):
        d = (j[f"{side}_success_frac"] - j[f"{side}_success_frac_2"]).abs() * 100
        ok &= bool((d <= 10).all())
    return ok, j


@pytest.fixture(scope="module")
def calibrations(kvm_host: Host) -> list[calibrate.HaltPollCalibration]:
    """Pairs of back-to-back calibrations, until a pair is reproducible (at most TRIES pairs)."""
    from vcpulab.quality import snapshot

    cals: list[calibrate.HaltPollCalibration] = []
    for _ in range(TRIES):
        s0 = snapshot([1])
        try:
            a = calibrate.halt_poll(rounds=ROUNDS, host=kvm_host, deadline_s=30, seed=0, warn_quality=False)
            b = calibrate.halt_poll(rounds=ROUNDS, host=kvm_host, deadline_s=30, seed=100, warn_quality=False)
        except TimeoutError as e:
            # cells that cannot finish: only a starved machine excuses that
            s1 = snapshot([1])
            wall = (s1.t_ns - s0.t_ns) / 1e3  # µs, as PSI counts
            psi = (
                (s1.psi_some_us - s0.psi_some_us) / wall
                if s1.psi_some_us is not None and s0.psi_some_us is not None
                else 0.0
            )
            if psi < 0.2:
                raise
            pytest.skip(
                f"calibration did not finish ({e}); tasks waited for a CPU {psi:.0%} of the time (PSI cpu some)"
            )
        cals += [a, b]
        if _reproducible(a, b)[0]:
            break
    from vcpulab.testing import REMEASURES

    for c in cals:
        REMEASURES.setdefault("tests/test_calibrate.py (cells: tries per cell)", []).extend(c.frame["tries"].to_list())
    return cals


def _disturbance(cals: list[calibrate.HaltPollCalibration]) -> str:
    """The measured disturbance of the informative cells."""
    d = pl.concat([c.frame.filter(pl.col("disturbed") & (pl.col("cell_class") == "informative")) for c in cals])
    return ", ".join(
        f"{g:g} µs × {m} ns: {q}" for g, m, q in d.select("gap_us", "max_poll_ns", "quality").head(4).iter_rows()
    )


# The two tests on real calibrations share a fixture of 15-27 s (two full
# calibrations, re-measured cell by cell on a busy hour): CI's slow run has
# them, so the default run keeps under 5 minutes (it read 312 s in a
# fresh-clone CI on a busy hour, 2026-12-05, the fixture's setup 26.6 s).
@pytest.mark.slow
def test_sim_matches_real_kvm_in_at_least_80_percent_of_cells(calibrations, tmp_path) -> None:  # type: ignore[no-untyped-def]
    for i, cal in enumerate(calibrations):
        print(f"\ncalibration {i}: {cal.agreement_line(15)}\n" + cal.table())
        print("measured costs:", cal.costs)
        print("sources:", cal.costs_source)
    cal = calibrations[-1]
    f = cal.frame
    assert f.height == 15
    assert set(f["gap_us"]) == {20.0, 50.0, 100.0, 300.0, 1000.0}
    assert set(f["max_poll_ns"]) == {0, 50_000, 200_000}
    # sim and real frames line up column for column on the kernel stat names
    for k in hp.STAT_COLUMNS:
        assert f"real_{k}" in f.columns and f"sim_{k}" in f.columns
    assert (f["real_halt_exits"] >= f["rounds"] * 0.95).all()
    # the classification follows the measured costs: the default grid has
    # cells of every class, and 1 ms gaps are far above both maxima
    assert set(f.filter(pl.col("gap_us") == 1000.0)["cell_class"]) == {"max_zero", "halt_above_max"}
    assert (f.filter(pl.col("max_poll_ns") == 0)["cell_class"] == "max_zero").all()
    # cells that agree by construction do agree
    by = f.filter(pl.col("cell_class").is_in(["max_zero", "halt_above_max"]) & ~pl.col("disturbed"))
    assert (by["real_success_frac"] <= 0.05).all() and (by["sim_success_frac"] <= 0.05).all(), by
    # the criterion, on the informative undisturbed cells of every calibration made
    counted = [c.informative().height for c in calibrations]
    if sum(counted) == 0:
        pytest.skip(f"every informative cell stayed disturbed after 3 tries: {_disturbance(calibrations)}")
    scores = [c.agreement(15) for c in calibrations if c.informative().height]
    assert all(a >= 0.8 for a in scores), [c.agreement_line(15) for c in calibrations]
    # with max poll 0 nothing polls, on both sides
    z = f.filter(pl.col("max_poll_ns") == 0)
    assert (z["real_halt_attempted_poll"] == 0).all() and (z["sim_halt_attempted_poll"] == 0).all()
    # the measured costs are plausible for this host (µs-scale, emulated guest)
    c = cal.costs
    assert 1_000 <= c.wake_to_cue_ns <= 500_000
    assert 0 <= c.wake_latency_ns <= 500_000
    fig_path = tmp_path / "cal.png"
    import matplotlib.pyplot as plt

    plt.close(cal.plot(fig_path))
    assert fig_path.stat().st_size > 0


@pytest.mark.slow
def test_calibration_is_reproducible(calibrations) -> None:  # type: ignore[no-untyped-def]
    pairs = [(calibrations[i], calibrations[i + 1]) for i in range(0, len(calibrations), 2)]
    for n, (a, b) in enumerate(pairs):
        ok, j = _reproducible(a, b)
        with pl.Config(tbl_rows=20, tbl_cols=14, tbl_width_chars=250):
            print(f"pair {n}: {'reproducible' if ok else 'NOT reproducible'} in {j.height} comparable cells\n{j}")
    ok, j = _reproducible(*pairs[-1])
    if j.filter(pl.col("cell_class") == "informative").height == 0:
        pytest.skip(f"no informative cell was undisturbed in both calibrations: {_disturbance(list(pairs[-1]))}")
    # the last pair made is within 10 points in every comparable cell, real and sim
    assert ok


def test_bad_arguments_raise_value_error_naming_them() -> None:
    # validated before /dev/kvm is opened: runs on any host
    with pytest.raises(ValueError, match="gaps_us"):
        calibrate.halt_poll(gaps_us=[])
    with pytest.raises(ValueError, match="max_poll_ns"):
        calibrate.halt_poll(max_poll_ns=[-1])
    with pytest.raises(ValueError, match="rounds"):
        calibrate.halt_poll(rounds=5)
    with pytest.raises(ValueError, match="min_cell_s"):
        calibrate.halt_poll(min_cell_s=-1)
    with pytest.raises(ValueError, match="pcpu"):
        calibrate.halt_poll(pcpu=4096)
    with pytest.raises(ValueError, match="sender_cpu must differ"):
        calibrate.halt_poll(pcpu=0, sender_cpu=0)
    with pytest.raises(ValueError, match="sim_replicas"):
        calibrate.halt_poll(sim_replicas=0)


def test_cost_fit_from_synthetic_cells() -> None:
    """The cost fit inverts the model: cells simulated with known costs give them back."""
    truth = hp.Costs(wake_to_cue_ns=25_000, cue_to_halt_ns=6_000, wake_latency_ns=18_000)
    rows = []
    for gap in (20, 50, 100):
        for mx in (0, 200_000):
            r = hp.run(
                hp.Scenario(
                    sim.HaltPoll(policy="block-time", vm_max_ns=mx),
                    vcpus=(hp.Message(gap * 1000),),
                    costs=truth,
                    rounds=300,
                )
            )
            s = r.stats.row(0, named=True)
            rows.append(
                {
                    "gap_us": float(gap),
                    "max_poll_ns": mx,
                    "real_rtt_median_us": s["rtt_median_us"],
                    "real_success_frac": s["success_frac"],
                    **{f"real_{k}": s[k] for k in hp.STAT_COLUMNS},
                }
            )
    costs, src = calibrate._fit_costs(pl.DataFrame(rows))
    print(costs, src)
    assert costs.wake_to_cue_ns == pytest.approx(truth.wake_to_cue_ns, abs=300)
    assert costs.wake_latency_ns == pytest.approx(truth.wake_latency_ns, abs=300)
    assert costs.cue_to_halt_ns == pytest.approx(truth.cue_to_halt_ns, abs=300)
    assert all(not math.isnan(v) for v in (costs.wake_to_cue_ns, costs.wake_latency_ns))


def test_a_cell_whose_load_readings_disagree_is_disturbed_and_measured_again() -> None:
    """The cell of a failed run: /proc/stat read 16.5 % other load (over the
    cell and the 100 ms before it), quality 1.1 % (over the cell alone); the
    simulator, given 16.5 % background, predicted 0.77 success against a real
    0.99. Such a cell counts as disturbed, and of two measurements the
    undisturbed one is kept, then the one with less load by either reading."""
    flake = {"busy_fraction": 0.165, "other_share": 0.011}
    calibrate._judge(flake, quality_disturbed=False)
    assert flake["disturbed"] and flake["load_disagreement"] == pytest.approx(0.154)
    steady = {"busy_fraction": 0.03, "other_share": 0.012}
    calibrate._judge(steady, quality_disturbed=False)
    assert not steady["disturbed"]
    loaded = {"busy_fraction": 0.012, "other_share": 0.03}
    calibrate._judge(loaded, quality_disturbed=True)
    assert loaded["disturbed"]
    assert min([flake, steady], key=calibrate._disturbance_key) is steady
    assert min([flake, loaded], key=calibrate._disturbance_key) is loaded
