"""Sched maps, plots and analysis helpers."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from vcpulab.analysis import LowPowerWarning, compare, mean_interval, t_critical, time_breakdown
from vcpulab.plot import BLACK, WHITE, policy_comparison, sched_map, sched_map_image, vcpu_color
from vcpulab.testing import assert_between, assert_equal_columns, assert_monotonic


@pytest.fixture(autouse=True)
def _close_figures():  # type: ignore[no-untyped-def]
    """Every test's figures are closed after it (pyplot keeps them; more than 20 open is a warning)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _two_vm_trace() -> pl.DataFrame:
    # 2 host CPUs, 100 µs. CPU 0: VM0.vCPU0 0-30 µs, VM1.vCPU1 30-60, idle 60-80, background 80-100.
    # CPU 1: VM1.vCPU0 0-50, VM0.vCPU1 50-100.
    rows = [
        (0, 0, 30_000, 0, 0),
        (0, 30_000, 60_000, 1, 1),
        (0, 80_000, 100_000, -1, -1),
        (1, 0, 50_000, 1, 0),
        (1, 50_000, 100_000, 0, 1),
    ]
    return pl.DataFrame(rows, schema=["pcpu", "start_ns", "end_ns", "vm", "vcpu"], orient="row").with_columns(
        pl.lit("slice").alias("why")
    )


def test_sched_map_pixels_follow_the_trace() -> None:
    img = sched_map_image(_two_vm_trace(), us_per_pixel=10)
    assert img.shape == (2, 10, 3)
    c = {key: vcpu_color(*key, n_vms=2, n_vcpus=2) for key in [(0, 0), (0, 1), (1, 0), (1, 1)]}
    assert len(set(c.values())) == 4  # every vCPU its own colour
    assert [tuple(p) for p in img[0]] == [c[0, 0]] * 3 + [c[1, 1]] * 3 + [WHITE] * 2 + [BLACK] * 2
    assert [tuple(p) for p in img[1]] == [c[1, 0]] * 5 + [c[0, 1]] * 5
    # one hue per VM, brightness per vCPU: same VM → same hue
    import colorsys

    hue = lambda rgb: colorsys.rgb_to_hls(*(x / 255 for x in rgb))[0]
    assert hue(c[0, 0]) == pytest.approx(hue(c[0, 1]), abs=0.02)
    assert hue(c[0, 0]) != pytest.approx(hue(c[1, 0]), abs=0.1)
    # rows can be taller than one pixel
    assert sched_map_image(_two_vm_trace(), us_per_pixel=10, row_px=3).shape == (6, 10, 3)


def test_a_simulated_sched_map_has_a_row_for_every_host_cpu_of_the_run() -> None:
    from vcpulab import sim
    from vcpulab.plot import IDLE, sched_map_codes

    cfg = sim.Config(host=sim.Host(n_pcpus=80), vms=(sim.Vm(vcpus=6, count=2),), duration_ns=5_000_000, trace=True)
    r = sim.run(cfg)
    assert int(r.trace["pcpu"].max()) < 79, "the 12 vCPUs leave most of the 80 CPUs idle"
    codes = sched_map_codes(r, us_per_pixel=50)
    assert codes.shape[0] == 80 and (codes[int(r.trace["pcpu"].max()) + 1 :] == IDLE).all()
    assert sched_map_image(r, us_per_pixel=50).shape[0] == 80 == sched_map(r, us_per_pixel=50, row_px=1).image.shape[0]
    # a bare trace frame has no run around it: rows up to its highest CPU
    assert sched_map_codes(r.trace, us_per_pixel=50).shape[0] == int(r.trace["pcpu"].max()) + 1


def test_sched_map_png_holds_the_raster_pixel_for_pixel(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import matplotlib.image as mpimg

    path = tmp_path / "map.png"
    sm = sched_map(_two_vm_trace(), path, us_per_pixel=10, row_px=2)
    png = (mpimg.imread(path)[..., :3] * 255).round().astype(np.uint8)
    # the raster sits at raster_origin_px in the saved figure, unscaled (the axes are around it)
    x, y = sm.raster_origin_px
    h, w = sm.image.shape[:2]
    assert np.array_equal(png[y : y + h, x : x + w], sm.image)
    assert sm.image.shape == (4, 10, 3)


def test_sched_map_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="no trace"):
        sched_map_image(type("R", (), {"trace": None})())
    with pytest.raises(ValueError, match="us_per_pixel"):
        sched_map_image(_two_vm_trace(), us_per_pixel=0)
    with pytest.raises(ValueError, match="missing columns"):
        sched_map_image(pl.DataFrame({"pcpu": [0]}))


def test_sched_map_of_a_simulated_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from vcpulab import sim

    cfg = sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=2, count=2),), duration_ns=2_000_000, trace=True)
    r = sim.run(cfg)
    img = sched_map_image(r, us_per_pixel=20)
    assert img.shape == (2, 100, 3)
    # overcommitted 2x and busy: nearly every pixel shows a vCPU colour
    assert (img != 255).any(axis=2).mean() > 0.9
    sched_map(r, tmp_path / "sim.png")
    assert (tmp_path / "sim.png").stat().st_size > 0
    tb = time_breakdown(r)
    sums = tb.group_by(["vm", "vcpu"]).agg(pl.col("fraction").sum())
    assert np.allclose(sums["fraction"].to_numpy(), 1.0)


def test_a_long_run_is_drawn_in_at_most_2000_columns_by_default() -> None:
    from vcpulab import sim
    from vcpulab.plot import AUTO_MAP_COLUMNS, DEFAULT_US_PER_PIXEL, auto_us_per_pixel

    # a short window keeps 10-us columns; a longer one the narrowest 1/2/5 x 10^k us that fits
    assert auto_us_per_pixel(20_000_000) == DEFAULT_US_PER_PIXEL
    assert auto_us_per_pixel(20_000_001) == 20.0
    assert auto_us_per_pixel(300_000_000) == 200.0
    assert auto_us_per_pixel(1_000_000_000) == 500.0
    assert auto_us_per_pixel(1_000_000_001) == 1000.0
    cfg = sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=2, count=2),), duration_ns=300_000_000, trace=True)
    r = sim.run(cfg)
    m = sched_map(r)
    assert m.image.shape[1] == 1500  # 300 ms at 200 us a column
    assert m.image.shape[1] <= AUTO_MAP_COLUMNS
    # an explicit width is kept, and a window picks its own default
    assert sched_map(r, us_per_pixel=100).image.shape[1] == 3000
    assert sched_map(r, start_ns=0, end_ns=5_000_000).image.shape[1] == 500


def test_a_wrong_type_is_a_type_error() -> None:
    from vcpulab import sim

    with pytest.raises(TypeError, match="sched_map needs a Result with a trace or a trace DataFrame, got str"):
        sched_map("foo")
    with pytest.raises(TypeError, match=r"run\(\) needs a vcpulab.sim.Config, got dict"):
        sim.run({"duration_ns": 1})  # type: ignore[arg-type]


def test_compare_finds_a_real_difference_and_not_noise() -> None:
    rng = np.random.default_rng(1)
    a = rng.normal(100, 5, 10)
    c = compare(a, a + 20)
    assert c.p_value < 0.01 and c.difference == pytest.approx(20)
    assert c.ci[0] < 20 < c.ci[1] and c.effect_size > 2
    same = compare(a, rng.normal(100, 5, 10))
    assert same.p_value > 0.05
    assert same.ci[0] < 0 < same.ci[1]
    # exact permutation test for small samples: 3 vs 3 fully separated → p = 2/20, the floor of
    # this design, which is above alpha: a warning says the test cannot reject
    with pytest.warns(LowPowerWarning, match="cannot give p below 0.1"):
        exact = compare([1, 2, 3], [7, 8, 9])
    assert exact.p_value == pytest.approx(0.1) and exact.min_p_value == pytest.approx(0.1)
    assert not exact.significant()
    assert "cannot go below p = 0.1" in str(exact)
    with pytest.warns(LowPowerWarning):
        one_sided = compare([1, 2, 3], [7, 8, 9], alternative="greater")
    assert one_sided.p_value == pytest.approx(0.05)
    df_a = pl.DataFrame({"throughput": a})
    assert compare(df_a, df_a, "throughput").p_value == 1.0
    with pytest.raises(ValueError, match="column"):
        compare(df_a, df_a, "nope")
    with pytest.raises(ValueError, match="finite"):
        compare([1.0, float("nan")], [1.0])


def test_compare_intervals_match_scipy_and_fit_small_samples() -> None:
    from scipy import stats

    rng = np.random.default_rng(7)
    a, b = rng.normal(100, 5, 4), rng.normal(110, 9, 5)
    with pytest.warns(LowPowerWarning):  # 4 vs 5: C(9,4) = 126 relabellings, p >= 1/126 > 0.005
        c = compare(a, b, alpha=0.005)
    # the default interval is Welch's t-interval, as scipy computes it
    ref = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert c.interval == "t" and c.ci == pytest.approx((ref.low, ref.high))
    assert c.min_p_value == pytest.approx(1 / 126)
    # paired: the paired t-interval, the sign-flip test, d_z
    base = rng.normal(100, 20, 8)  # large run-to-run spread shared by the pair
    a2, b2 = base, base * 1.03 + rng.normal(0, 0.5, 8)
    p = compare(a2, b2, paired=True)
    ref = stats.ttest_rel(b2, a2).confidence_interval(0.95)
    assert p.paired and p.ci == pytest.approx((ref.low, ref.high))
    assert p.min_p_value == pytest.approx(2 / 2**8)
    assert p.p_value < 0.05 and p.relative_ci[0] > 0.02
    # unpaired, the shared spread hides the 3 % gain
    u = compare(a2, b2)
    assert u.p_value > 0.05 and u.ci[0] < 0 < u.ci[1]
    # pair_by aligns DataFrame rows by a column, whatever their order
    da = pl.DataFrame({"seed": list(range(8)), "x": a2})
    db = pl.DataFrame({"seed": list(range(8))[::-1], "x": b2[::-1]})
    assert compare(da, db, "x", pair_by="seed").p_value == pytest.approx(p.p_value)
    with pytest.raises(ValueError, match="differ between the sides"):
        compare(da, db.with_columns(pl.col("seed") + 1), "x", pair_by="seed")
    with pytest.raises(ValueError, match="as many values"):
        compare([1.0, 2.0], [1.0], paired=True)
    # BCa bootstrap interval: contains the difference, deterministic for a seed
    bca = compare(a2, b2, paired=True, interval="bca", seed=3)
    assert bca.ci[0] < p.difference < bca.ci[1]
    assert bca.ci == compare(a2, b2, paired=True, interval="bca", seed=3).ci
    # mean_interval is the one-sample t-interval
    ref = stats.ttest_1samp(a, 0).confidence_interval(0.9)
    assert mean_interval(a, 0.9) == pytest.approx((ref.low, ref.high))


def test_policy_comparison_and_frame_assertions() -> None:
    df = pl.DataFrame({"policy": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1], "ops": [10.0, 12.0, 20.0, 22.0]})
    fig = policy_comparison(df, "ops")
    assert len(fig.axes[0].patches) == 2
    # the error bars are t-intervals from scipy (df = 1: t = 12.706), not a hand-written table
    from scipy import stats

    bars = fig.axes[0].patches
    assert [b.get_height() for b in bars] == pytest.approx([11.0, 21.0])
    caps = fig.axes[0].lines  # the caps of both error bars: (lower, upper) per bar
    half = stats.t.ppf(0.975, 1) * np.std([10.0, 12.0], ddof=1) / np.sqrt(2)
    ys = sorted(float(y) for line in caps for y in line.get_ydata())
    assert ys[0] == pytest.approx(11.0 - half) and ys[-1] == pytest.approx(21.0 + half)
    # gains over a baseline, a second factor as hue
    two = pl.concat(
        [df.with_columns(pl.lit("1x").alias("oc")), df.with_columns(pl.lit("2x").alias("oc"), pl.col("ops") * 2)]
    )
    two = pl.concat(
        [two, two.filter(pl.col("policy") == "a").with_columns(pl.lit("c").alias("policy"), pl.col("ops") * 1.5)]
    )
    g = policy_comparison(two, "ops", baseline="a", hue="oc", pair_by="seed")
    heights = [b.get_height() for b in g.axes[0].patches]
    assert heights == pytest.approx([(21 / 11 - 1) * 100, 50.0, (21 / 11 - 1) * 100, 50.0])  # b, c per hue level
    assert "gain over a" in g.axes[0].get_ylabel()
    assert [t.get_text() for t in g.axes[0].get_legend().get_texts()] == ["1x", "2x"]
    with pytest.raises(ValueError, match="baseline 'z'"):
        policy_comparison(df, "ops", baseline="z")
    assert_between(df, "ops", 10, 22)
    with pytest.raises(AssertionError, match="outside"):
        assert_between(df, "ops", 11, None)
    assert_monotonic(df, "ops", by=("policy",), order="seed")
    with pytest.raises(AssertionError, match="decreases"):
        assert_monotonic(df.with_columns(pl.col("ops") * -1), "ops", by=("policy",), order="seed")
    assert_equal_columns(df, "ops", "ops")
    with pytest.raises(AssertionError, match="missing"):
        assert_between(df, "nope", 0, 1)


@pytest.mark.filterwarnings("ignore::vcpulab.quality.QualityWarning")  # the summaries, whatever else ran
def test_results_show_html_summaries_with_provenance(kvm_host) -> None:  # type: ignore[no-untyped-def]
    from vcpulab import sim
    from vcpulab.experiment import Spin, run

    r = sim.run(sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=2, count=2),), duration_ns=1_000_000, seed=3))
    html = r._repr_html_()
    assert "simulated run" in html and "seed 3" in html and "kernel" in html
    prov = r.provenance
    assert (
        prov["seed"] == 3 and prov["config_hash"] == r.config_hash and "halt_poll_ns" in str(prov["kvm_module_params"])
    )
    real = run(Spin(), vcpus=1, duration_s=0.05, host=kvm_host, warn_quality=False)
    assert "real-KVM run" in real._repr_html_()
    assert real.config["provenance"]["kernel_release"] == prov["kernel_release"]
    assert "KVM host" in kvm_host._repr_html_()
    with kvm_host.create_vm(memory_mib=2) as vm:
        assert "KVM VM" in vm._repr_html_()


def test_real_run_plots_label_vcpus_draw_the_fair_share_and_separate_stats(kvm_host) -> None:  # type: ignore[no-untyped-def]
    from vcpulab.experiment import Spin, run
    from vcpulab.plot import fair_share_steal_fraction, stats_over_time, steal_over_time

    r = run(Spin(), vcpus=4, pcpus=[0], duration_s=0.2, sample_every_s=0.02, host=kvm_host, warn_quality=False)
    assert fair_share_steal_fraction(r) == pytest.approx(0.75)
    assert fair_share_steal_fraction({(0, 0): [0, 1], (0, 1): [1]}) == 0.0
    fig = steal_over_time(r)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["vCPU 0", "vCPU 1", "vCPU 2", "vCPU 3", "fair share (75% steal)"]
    # exits and emulated instructions differ by orders of magnitude: one axes each
    fig = stats_over_time(r, ["exits", "insn_emulation"])
    assert len(fig.axes) == 2 and [a.get_ylabel().split()[0] for a in fig.axes] == ["exits", "insn_emulation"]
    # the four vCPUs share CPU 0 until the end: the last rate is one of the others, not a drop to 0
    y = fig.axes[1].get_lines()[0].get_ydata()
    assert y[-1] > 0.3 * np.median(y[:-1]), y
    with pytest.raises(ValueError, match="unknown stats"):
        stats_over_time(r, ["nope"])


def test_gang_share_is_one_under_gang_scheduling_and_low_for_independent_vcpus() -> None:
    """analysis.gang_share on two VMs of 4 spinning vCPUs sharing 4 CPUs:
    the gang scheduler runs a VM's vCPUs all together or not at all (1.0);
    unpinned vCPU threads under the fair scheduler, with ticks out of step,
    seeded ties and jittered wake-ups, run some of a VM's vCPUs at most
    instants (seed 1: 0.125). With synchronous ticks and a map that pairs
    the VMs' vCPUs on every CPU the fair scheduler too gives 1.0: the
    lock-step this measure exists to catch."""
    from vcpulab import sim
    from vcpulab.analysis import gang_share
    from vcpulab.sim import presets

    def run(**host):  # type: ignore[no-untyped-def]
        vm = sim.Vm(vcpus=4, count=2, workload=presets.spinlock_microbench())
        cfg = sim.Config(host=sim.Host(n_pcpus=4, **host), vms=(vm,), duration_ns=40_000_000, trace=True, seed=1)
        return sim.run(cfg)

    assert gang_share(run(scheduler="gang")) > 0.95
    assert gang_share(run(affinity="round_robin")) == 1.0
    jitter = dict(tick_skew=True, seeded_ties=True, wakeup_ipi_ns=1500, wakeup_jitter=0.5)
    assert gang_share(run(affinity="all", **jitter)) < 0.5
    untraced = sim.run(sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=2),), duration_ns=1_000_000))
    with pytest.raises(ValueError, match="trace=True"):
        gang_share(untraced)
    with pytest.raises(ValueError, match="step_ns"):
        gang_share(run(scheduler="gang"), step_ns=0)


def test_a_sched_map_of_a_window_of_a_long_run_needs_only_the_windows_rows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Config.trace_from_ns / trace_until_ns: a 30 ms sched map of a 200 ms
    run of 8 x 20 vCPUs records the slices that overlap those 30 ms, the
    same rows as the whole trace has there, and the map draws them."""
    from vcpulab import sim
    from vcpulab.sim import scenarios as S

    base = S.sched_map_2012(8, 20, scheduler="fair", duration_ns=60_000_000, warmup_ns=10_000_000, seed=2)
    full = sim.run(base.replace(trace=True))
    lo, hi = 30_000_000, 40_000_000
    win = sim.run(base.replace(trace=True, trace_from_ns=lo, trace_until_ns=hi))
    assert full.trace is not None and win.trace is not None
    want = full.trace.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") < hi))
    assert win.trace.equals(want) and 0 < win.trace.height < full.trace.height / 3
    assert win.summary.equals(full.summary)
    m = sched_map(win, tmp_path / "w.png", start_ns=lo, end_ns=hi)
    assert (tmp_path / "w.png").stat().st_size > 0 and m.start_ns == lo
    # the window's raster is the whole trace's raster of the same window
    assert np.array_equal(m.image, sched_map(full, start_ns=lo, end_ns=hi).image)


def test_bounded_interval_stays_in_range_and_is_the_t_interval_far_from_a_bound() -> None:
    from vcpulab.analysis import bounded_interval, interval_method, t_interval, value_range

    # the case: five trials of a count; the t interval goes below 0, this one cannot
    counts = [0, 12, 40, 90, 105]
    assert t_interval(counts)[1] < 0
    m, lo, hi = bounded_interval(counts, low=0)
    assert m == pytest.approx(49.4) and 0 < lo < m < hi
    f = np.exp(t_critical(0.95, 4) * np.std(counts, ddof=1) / np.sqrt(5) / m)
    assert (lo, hi) == pytest.approx((m / f, m * f))
    # far from the bound it is the t interval to within a fraction of a percent
    far = [1000.0, 1010.0, 990.0, 1004.0]
    assert bounded_interval(far, low=0) == pytest.approx(t_interval(far), rel=1e-3)
    assert bounded_interval(far) == pytest.approx(t_interval(far))
    # a share: inside [0, 1] even at 0.97 with few values; an upper bound alone mirrors the lower
    share = [0.99, 0.93, 1.0, 0.96]
    assert t_interval(share)[2] > 1
    _, lo, hi = bounded_interval(share, low=0, high=1)
    assert 0 < lo < np.mean(share) < hi < 1
    _, lo1, hi1 = bounded_interval([1 - x for x in share], high=1)
    _, lo0, hi0 = bounded_interval(share, low=0)
    assert (1 - hi1, 1 - lo1) == pytest.approx((lo0, hi0)) and 0 < lo0 and hi1 < 1
    # every value on the bound: the point interval; one value: NaN bounds
    assert bounded_interval([0, 0, 0], low=0) == (0.0, 0.0, 0.0)
    assert bounded_interval([1.0, 1.0], low=0, high=1) == (1.0, 1.0, 1.0)
    assert np.isnan(bounded_interval([3.0], low=0)[1])
    # a value outside the range, or a range that is empty, is refused by name
    with pytest.raises(ValueError, match="leave the range"):
        bounded_interval([-1, 2, 3], low=0)
    with pytest.raises(ValueError, match="below high"):
        bounded_interval([0.5, 0.6], low=1, high=1)
    with pytest.raises(ValueError, match="confidence"):
        bounded_interval([1, 2], confidence=1.5, low=0)
    assert [interval_method(), interval_method(0), interval_method(0, 1)] == ["t", "log-t", "logit-t"]
    # the ranges vcpulab's column names carry
    assert value_range("steal_fraction") == value_range("polled_per_halt") == (0.0, 1.0)
    assert value_range("acq_per_s") == value_range("wait_per_acq_us") == value_range("n", pl.Int64) == (0.0, None)
    assert value_range("effect") == value_range("effect", pl.Float64) == (None, None)


def test_bounded_interval_covers_at_its_level_on_small_samples_of_counts_and_shares() -> None:
    """Coverage of the true mean over 2000 fixed-seed samples (deterministic):
    at the nominal 95 % where the t interval also is, never out of range where
    the t interval often is."""
    from vcpulab.analysis import bounded_interval, t_interval

    rng = np.random.default_rng(1)
    for draw, truth, lo_b, hi_b in [
        (lambda: rng.poisson(3.0, 5), 3.0, 0.0, None),
        (lambda: rng.binomial(200, 0.97, 5) / 200, 0.97, 0.0, 1.0),
    ]:
        hit = out = t_out = 0
        for _ in range(2000):
            x = draw()
            _, a, b = bounded_interval(x, 0.95, lo_b, hi_b)
            _, c, d = t_interval(x)
            hit += a <= truth <= b
            out += a < lo_b or (hi_b is not None and b > hi_b)
            t_out += c < lo_b or (hi_b is not None and d > hi_b)
        assert 0.93 <= hit / 2000 <= 0.98
        assert out == 0 and t_out > 0


def _label_boxes(fig):  # type: ignore[no-untyped-def]
    """The window extents (px) of a figure's texts: its title, each axes' labels and tick labels."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = {f"text {i}": t.get_window_extent(r) for i, t in enumerate(fig.texts) if t.get_text()}
    for k, ax in enumerate(fig.axes):
        for name, t in (("xlabel", ax.xaxis.label), ("ylabel", ax.yaxis.label), ("title", ax.title)):
            if t.get_text():
                boxes[f"axes {k} {name}"] = t.get_window_extent(r)
        for i, t in enumerate(ax.get_xticklabels() + ax.get_yticklabels()):
            if t.get_text() and t.get_visible():
                boxes[f"axes {k} tick {i} {t.get_text()}"] = t.get_window_extent(r)
    return boxes


def _overlapping(boxes):  # type: ignore[no-untyped-def]
    import itertools

    return [(a, b) for a, b in itertools.combinations(boxes, 2) if boxes[a].overlaps(boxes[b])]


@pytest.mark.parametrize("kw", [{}, {"row_px": 1}, {"compact": True}], ids=["default", "row_px=1", "compact"])
def test_a_one_cpu_sched_map_keeps_its_title_clear_of_the_axis_labels(kw) -> None:  # type: ignore[no-untyped-def]
    # a traced real run on one host CPU (CPU 3): one row
    trace = pl.DataFrame(
        [(3, 0, 30_000, 0, 0), (3, 30_000, 60_000, 0, 1), (3, 60_000, 100_000, -1, -1)],
        schema=["pcpu", "start_ns", "end_ns", "vm", "vcpu"],
        orient="row",
    )
    real = type("Run", (), {"trace": trace, "trace_info": {"cpus": [3], "window_ns": 100_000}})()
    fig = sched_map(real, us_per_pixel=1, title="a real run on one host CPU: 2 vCPUs", **kw)
    boxes = _label_boxes(fig)
    assert {"text 0", "axes 0 xlabel", "axes 0 ylabel"} <= set(boxes)
    assert not _overlapping(boxes)
    # the raster is still drawn pixel for pixel, one row of row_px pixels
    assert fig.image.shape[0] == (kw.get("row_px") or (1 if kw.get("compact") else 48))


def _constant_rate_run(tail_ns: int, teardown_ns: int = 0, rate_per_s: float = 10_000.0, vcpus: int = 2):  # type: ignore[no-untyped-def]
    """A real run's frames as run() returns them, each vCPU counting ``rate_per_s`` exits a second
    from 0.1 ms to its deadline of 300 ms, sampled every 10 ms; the last sample comes ``tail_ns`` after
    the deadline, the threads end ``teardown_ns`` after it."""
    from vcpulab.experiment import Run

    period_ns, n = 10_000_000, 30
    start, end = 100_000, n * period_ns
    ts = [i * period_ns for i in range(n)] + [end + 10_000, end + tail_ns]
    rows = [
        {"t_ns": t, "vm": 0, "vcpu": v, "steal_ns": 0, "exits": int(rate_per_s * max(0, min(t, end) - start) / 1e9)}
        for t in ts
        for v in range(vcpus)
    ]
    threads = pl.DataFrame({"vm": [0] * vcpus, "vcpu": list(range(vcpus)), "start_ns": [start] * vcpus,
                            "wall_ns": [end + teardown_ns - start] * vcpus})  # fmt: skip
    return Run(samples=pl.DataFrame(rows), results=pl.DataFrame(), threads=threads, wall_s=ts[-1] / 1e9,
               placement={}, config={"duration_s": end / 1e9})  # fmt: skip


@pytest.mark.parametrize(
    ("tail_ns", "teardown_ns"), [(5_000_000, 0), (400_000, 300_000)], ids=["slow join", "thread teardown"]
)
def test_stats_over_time_ends_at_the_runs_rate_not_at_0(tail_ns: int, teardown_ns: int) -> None:
    from vcpulab.plot import stats_over_time

    run = _constant_rate_run(tail_ns, teardown_ns)
    fig = stats_over_time(run, ["exits"])
    (line,) = fig.axes[0].get_lines()
    y = line.get_ydata()
    # two vCPUs at 10000 exits/s: 20000/s summed, to the last point (the interval after the threads ended was a 0)
    assert len(y) == 30 and np.allclose(y, 20_000.0, rtol=0.01)
    assert y[-1] == pytest.approx(20_000.0, rel=0.01)
    assert "sum of 2 vCPUs" in fig.axes[0].get_ylabel() and "per s" in fig.axes[0].get_ylabel()
    raw = stats_over_time(run, ["exits"], per_second=False).axes[0].get_lines()[0].get_ydata()
    assert raw[-1] == pytest.approx(200.0, abs=1)  # counts per interval: no partial interval at the end


def test_the_validation_figure_colours_a_case_alike_in_both_panels_and_its_labels_do_not_overlap() -> None:
    from matplotlib.colors import to_hex

    from vcpulab.plot import validation

    # one case of each verdict: right and within 2x, right direction only (11.8x published, 128x simulated),
    # wrong direction, a share (no direction) not within 2x, and small effects around 0 (the symlog band)
    rows = [
        ("a_within", "ratio", 3.88, 2.34, 2.0, 2.7, True, True, 0.60),
        ("b_direction_only", "ratio", 11.8, 128.5, 120.0, 137.0, True, False, 10.9),
        ("c_wrong", "throughput_change", 0.7, 0.003, -0.01, 0.02, False, False, 0.0045),
        ("d_share", "share", 0.2, 0.05, 0.04, 0.06, None, False, 0.25),
        ("e_small", "throughput_change", 0.01, 0.012, -0.2, 0.2, True, True, 1.2),
        ("f_negative", "wall_time_change", -0.84, -0.02, -0.03, -0.01, True, False, 0.024),
    ]
    cols = ["case", "metric", "published", "sim_mean", "ci_low", "ci_high", "direction_ok", "within_2x", "sim_over_pub"]
    df = pl.DataFrame(rows, schema=cols, orient="row").with_columns(pl.lit("simulated").alias("status"))
    fig = validation(df)
    ax, bx = fig.axes
    # an errorbar per comparison (the shares are not comparisons), a bar per case, in the frame's order
    left = {
        f"case {r[0]}": to_hex(c.lines[0].get_color())
        for r, c in zip([r for r in rows if r[1] != "share"], ax.containers)
    }
    right = {f"case {r[0]}": to_hex(b.get_facecolor()) for r, b in zip(rows, bx.containers[0])}
    assert len(ax.containers) == 5 and len(right) == 6
    assert all(left[k] == right[k] for k in left), (left, right)
    # three colours, each one verdict: c_wrong red, the direction-only and the share orange
    assert right["case c_wrong"] != right["case b_direction_only"] == right["case d_share"] != right["case a_within"]
    assert len(set(right.values())) == 3
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(legend) == 3 and any("wrong direction" in t for t in legend)
    assert not _overlapping(_label_boxes(fig))


@pytest.mark.parametrize(("vms", "vcpus"), [(16, 10), (8, 20)])
def test_time_breakdown_tick_labels_do_not_overlap_in_a_row_of_panels(vms: int, vcpus: int) -> None:
    """As notebook 04 draws them: three panels of 4 in side by side, 16 VMs (or 160 vCPUs) each."""
    import matplotlib.pyplot as plt

    from vcpulab.plot import time_breakdown as plot_breakdown

    v = pl.DataFrame(
        {"vm": [m for m in range(vms) for _ in range(vcpus)], "vcpu": [c for _ in range(vms) for c in range(vcpus)]}
    ).with_columns(useful_ns=pl.lit(300), spin_ns=pl.lit(500), wait_ns=pl.lit(200))
    for by in ("vm", "vcpu"):
        fig, axes = plt.subplots(1, 3, figsize=(12, 3), sharey=True)
        for ax in axes:
            plot_breakdown(v, by=by, ax=ax)
            if ax is not axes[-1]:
                ax.get_legend().remove()
        fig.tight_layout()
        boxes = _label_boxes(fig)
        assert sum("tick" in k for k in boxes) >= 3 * min(vms, 16) // 2, "labels thinned, not dropped"
        assert not _overlapping(boxes), by
