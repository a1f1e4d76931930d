"""Calibration of the halt-polling model against real KVM on this host
(the issue's "what it must show"): for gaps {20, 50, 100, 300, 1000} µs ×
max poll {0, 50000, 200000} ns the simulated successful-poll fraction is within
15 points of real KVM's in ≥ 80 % of the cells, and two calibrations agree
within 10 points per cell."""

from __future__ import annotations

import math

import polars as pl
import pytest

from vcpulab import calibrate
from vcpulab.kvm import Host
from vcpulab.sim import halt_poll as hp

ROUNDS = 200
#: other engineers' builds share this host: a comparison is retried (each try
#: printed) when the load changed under it; a host whose load is steady (idle
#: or busy) passes at the first try
TRIES = 3


def _reproducible(a: calibrate.HaltPollCalibration, b: calibrate.HaltPollCalibration) -> tuple[bool, pl.DataFrame]:
    keys = ["gap_us", "max_poll_ns"]
    cols = ["real_success_frac", "sim_success_frac", "busy_fraction"]
    j = a.frame.select(keys + cols).join(b.frame.select(keys + cols), on=keys, suffix="_2")
    ok = True
    for side in ("real", "sim"):
        d = (j[f"{side}_success_frac"] - j[f"{side}_success_frac_2"]).abs() * 100
        ok &= bool((d <= 10).all())
    return ok, j


@pytest.fixture(scope="module")
def calibrations(kvm_host: Host) -> list[calibrate.HaltPollCalibration]:
    """Pairs of back-to-back calibrations, until a pair is reproducible (at most TRIES pairs)."""
    cals: list[calibrate.HaltPollCalibration] = []
    for i in range(TRIES):
        a = calibrate.halt_poll(rounds=ROUNDS, host=kvm_host, deadline_s=60, seed=0)
        b = calibrate.halt_poll(rounds=ROUNDS, host=kvm_host, deadline_s=60, seed=100)
        cals += [a, b]
        if _reproducible(a, b)[0]:
            break
    return cals


def test_sim_matches_real_kvm_in_at_least_80_percent_of_cells(calibrations, tmp_path) -> None:  # type: ignore[no-untyped-def]
    for i, cal in enumerate(calibrations):
        print(f"\ncalibration {i}: cells within 15 points: {cal.agreement(15):.0%}\n" + cal.table())
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
    # the criterion, on every calibration made (not only the best)
    assert all(c.agreement(15) >= 0.8 for c in calibrations), [c.agreement(15) for c in calibrations]
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


def test_calibration_is_reproducible(calibrations) -> None:  # type: ignore[no-untyped-def]
    pairs = [(calibrations[i], calibrations[i + 1]) for i in range(0, len(calibrations), 2)]
    for n, (a, b) in enumerate(pairs):
        ok, j = _reproducible(a, b)
        with pl.Config(tbl_rows=20, tbl_cols=10, tbl_width_chars=200):
            print(f"pair {n}: {'reproducible' if ok else 'NOT reproducible (load changed?)'}\n{j}")
    # the last pair made is within 10 points in every cell, real and sim
    assert _reproducible(*pairs[-1])[0]


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
            r = hp.run(hp.Scenario(hp.Params(vm_max_ns=mx), vcpus=(hp.Message(gap * 1000),), costs=truth, rounds=300))
            s = r.stats.row(0, named=True)
            rows.append({"gap_us": float(gap), "max_poll_ns": mx, "real_rtt_median_us": s["rtt_median_us"],
                         "real_success_frac": s["success_frac"], **{f"real_{k}": s[k] for k in hp.STAT_COLUMNS}})  # fmt: skip
    costs, src = calibrate._fit_costs(pl.DataFrame(rows))
    print(costs, src)
    assert costs.wake_to_cue_ns == pytest.approx(truth.wake_to_cue_ns, abs=300)
    assert costs.wake_latency_ns == pytest.approx(truth.wake_latency_ns, abs=300)
    assert costs.cue_to_halt_ns == pytest.approx(truth.cue_to_halt_ns, abs=300)
    assert all(not math.isnan(v) for v in (costs.wake_to_cue_ns, costs.wake_latency_ns))
