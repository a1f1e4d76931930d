"""Analysis helpers: A/B comparison (permutation test, small-sample
intervals, paired designs), tidy KVM stat deltas, time breakdowns.

The A/B discipline: run each variant several times (seeds in the simulator,
repetitions on real KVM), then ask whether the difference in a metric is larger
than the run-to-run noise::

    from vcpulab.analysis import compare
    c = compare(runs_a, runs_b, metric="throughput", pair_by="seed")
    c.p_value, c.ci, c.relative, c.relative_ci

Runs of two variants with the same seed share their random draws: pair them
(``pair_by="seed"``, or ``paired=True`` for aligned sequences). With few runs
the permutation test cannot reach small p-values at all (3 vs 3 unpaired:
p >= 0.1; 3 pairs: p >= 0.25); [`compare`][vcpulab.analysis.compare] reports that floor
(``min_p_value``) and warns ([`LowPowerWarning`][vcpulab.analysis.LowPowerWarning]) when it is above
``alpha`` — then only the interval, not the p-value, can speak.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from math import comb
from typing import Any, Literal

import numpy as np
import polars as pl

from vcpulab import _frames
from vcpulab._checks import check_bool, check_float, check_int, check_seq

__all__ = [
    "MAX_RESAMPLES",
    "Comparison",
    "IntervalMethod",
    "LowPowerWarning",
    "bounded_interval",
    "compare",
    "exits_by_reason",
    "interval_method",
    "gang_share",
    "mean_interval",
    "stat_deltas",
    "t_critical",
    "t_interval",
    "time_breakdown",
    "value_range",
    "wakeup_latency",
]

Interval = Literal["t", "bca", "percentile"]


class LowPowerWarning(UserWarning):
    """The design cannot reach the significance level: the smallest p-value
    the permutation test can give is not below ``alpha`` (too few runs)."""


@dataclass(frozen=True)
class Comparison:
    """Result of [`compare`][vcpulab.analysis.compare] (B relative to A)."""

    metric: str
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    #: mean_b - mean_a
    difference: float
    #: difference / mean_a (nan when mean_a is 0)
    relative: float
    #: effect size: Cohen's d with the pooled standard deviation (unpaired) or
    #: d_z, the mean of the paired differences over their standard deviation
    #: (paired); nan with < 2 values per side
    effect_size: float
    #: permutation-test p-value for the difference in means (sign-flip test
    #: of the differences when paired)
    p_value: float
    #: confidence interval of the difference (``interval`` says which kind)
    ci: tuple[float, float]
    confidence: float
    n_resamples: int
    #: whether the runs were paired
    paired: bool = False
    #: the kind of interval: "t" (Welch, or paired t), "bca" or "percentile" bootstrap
    interval: str = "t"
    #: the smallest p-value this design can give (exact test); the test cannot
    #: reject at ``alpha`` when this is above it
    min_p_value: float = 0.0
    #: confidence interval of ``relative`` (paired: t-interval of the per-pair
    #: ratios b/a - 1; unpaired: delta method with Welch degrees of freedom)
    relative_ci: tuple[float, float] = (float("nan"), float("nan"))
    #: the significance level the design was checked against
    alpha: float = 0.05

    def significant(self, alpha: float = 0.05) -> bool:
        """p < alpha (never true when ``min_p_value >= alpha``)."""
        return self.p_value < alpha

    def __str__(self) -> str:
        design = f"{self.n_a} pairs" if self.paired else f"n={self.n_a} vs n={self.n_b}"
        floor = f" (this design cannot go below p = {self.min_p_value:.3g})" if self.min_p_value >= self.alpha else ""
        return (
            f"{self.metric}: A {self.mean_a:.4g} vs B {self.mean_b:.4g} ({design}); "
            f"B-A = {self.difference:.4g} ({self.relative:+.1%}, {self.confidence:.0%} CI "
            f"[{self.relative_ci[0]:+.1%}, {self.relative_ci[1]:+.1%}]), {self.confidence:.0%} {self.interval} CI "
            f"[{self.ci[0]:.4g}, {self.ci[1]:.4g}], d = {self.effect_size:.2f}, p = {self.p_value:.4f}{floor}"
        )


#: most bootstrap / permutation resamples of one comparison
MAX_RESAMPLES = 10_000_000


def _check_fraction(name: str, v: Any) -> float:
    """A number in the open interval (0, 1) (a confidence, a significance level)."""
    f = check_float(name, v, 0.0, 1.0, lo_open=True)
    if f >= 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {f}")
    return f


def _values(x: Any, metric: str | None, side: str = "a") -> np.ndarray:
    if isinstance(x, pl.DataFrame):
        if metric is None:
            raise ValueError("compare: name the metric column when passing DataFrames")
        if metric not in x.columns:
            raise ValueError(f"compare: column {metric!r} not in the frame (columns: {x.columns})")
        v = x[metric].cast(pl.Float64).to_numpy()
    else:
        items = check_seq(f"compare: {side}", x, "numbers (or a DataFrame)")
        if any(isinstance(i, (bool, str, bytes)) or not isinstance(i, numbers.Real) for i in items):
            raise TypeError(f"compare: {side} must hold numbers, got {items!r}")
        v = np.asarray(items, dtype=float)
    if v.ndim != 1 or len(v) == 0:
        raise ValueError(f"compare: {side} needs at least one value (each side does)")
    if not np.all(np.isfinite(v)):
        raise ValueError("compare: values must be finite (drop NaN/inf first)")
    return v


def _paired_values(a: Any, b: Any, metric: str | None, pair_by: str) -> tuple[np.ndarray, np.ndarray]:
    if not (isinstance(a, pl.DataFrame) and isinstance(b, pl.DataFrame)):
        raise ValueError("compare: pair_by needs two DataFrames")
    for side, df in (("a", a), ("b", b)):
        if pair_by not in df.columns:
            raise ValueError(f"compare: pair_by column {pair_by!r} not in {side} (columns: {df.columns})")
        if df[pair_by].n_unique() != df.height:
            raise ValueError(f"compare: {pair_by!r} repeats in {side}; each value must name one run")
    ka, kb = set(a[pair_by].to_list()), set(b[pair_by].to_list())
    if ka != kb:
        raise ValueError(
            f"compare: {pair_by!r} values differ between the sides: only in a {sorted(ka - kb)}, only in b {sorted(kb - ka)}"
        )
    a, b = a.sort(pair_by), b.sort(pair_by)
    return _values(a, metric, "a"), _values(b, metric, "b")


def t_critical(confidence: float, df: float) -> float:
    """The two-sided Student-t critical value t_{1-(1-confidence)/2, df}
    (scipy.stats.t.ppf). vcpulab's one source of t quantiles: every interval
    it reports (Trials.summary, twins, validation, compare) is computed from it.

        >>> from vcpulab.analysis import t_critical
        >>> round(t_critical(0.95, 4), 3)
        2.776
    """
    _check_fraction("confidence", confidence)
    d = check_float("df", df, 0.0, float("inf"), lo_open=True)
    from scipy import stats

    return float(stats.t.ppf(1 - (1 - confidence) / 2, d))


def t_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the finite ``values`` and its Student-t
    interval (n-1 degrees of freedom); NaN bounds with fewer than two finite
    values, all NaN with none. NaN and infinite values are left out (a seed
    that measured nothing), unlike [`mean_interval`][vcpulab.analysis.mean_interval],
    which refuses them."""
    x = np.asarray(values, dtype=float).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(x.mean())
    if x.size < 2:
        return m, float("nan"), float("nan")
    h = t_critical(confidence, x.size - 1) * float(x.std(ddof=1)) / float(np.sqrt(x.size))
    return m, m - h, m + h


#: how [`bounded_interval`][vcpulab.analysis.bounded_interval] formed an interval: ``"t"`` (no
#: bound: the symmetric Student-t interval), ``"log-t"`` (one bound: the t interval of the log of the
#: distance to the bound), ``"logit-t"`` (both bounds: the t interval of the logit of the position
#: between them)
IntervalMethod = Literal["t", "log-t", "logit-t"]

#: result-column name endings that mean a share of something, in [0, 1]
_SHARE_ENDINGS = ("_share", "_fraction", "_per_halt")
#: result-column name endings of a duration, a rate or a size: never negative
_UNIT_ENDINGS = ("_s", "_ms", "_us", "_ns", "_per_s", "_hz", "_bytes", "_mb")


def value_range(name: str, dtype: Any = None) -> tuple[float | None, float | None]:
    """The range a quantity cannot leave, read from its name and type as vcpulab
    names columns: ``(0, 1)`` for a share (a name ending ``_share``,
    ``_fraction`` or ``_per_halt``); ``(0, None)`` for a count (an integer
    ``dtype``) or a duration, rate or size (a name ending in its unit, ``_us``,
    ``_per_s``, …); ``(None, None)`` otherwise. ``dtype`` is a polars or numpy
    dtype, or None.

        >>> from vcpulab.analysis import value_range
        >>> value_range("steal_fraction"), value_range("wait_per_acq_us"), value_range("delta")
        ((0.0, 1.0), (0.0, None), (None, None))
    """
    if not isinstance(name, str):
        raise TypeError(f"value_range: name must be a str, got {type(name).__name__}")
    if name.endswith(_SHARE_ENDINGS):
        return (0.0, 1.0)
    integer = False
    if dtype is not None:
        if isinstance(dtype, pl.DataType) or (isinstance(dtype, type) and issubclass(dtype, pl.DataType)):
            integer = dtype.is_integer()
        else:
            integer = np.issubdtype(np.dtype(dtype), np.integer)
    if integer or name.endswith(_UNIT_ENDINGS):
        return (0.0, None)
    return (None, None)


def interval_method(low: float | None = None, high: float | None = None) -> IntervalMethod:
    """The [`IntervalMethod`][vcpulab.analysis.IntervalMethod]
    [`bounded_interval`][vcpulab.analysis.bounded_interval] uses for these bounds."""
    if low is not None and high is not None:
        return "logit-t"
    if low is not None or high is not None:
        return "log-t"
    return "t"


def bounded_interval(
    values: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    low: float | None = None,
    high: float | None = None,
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the finite ``values`` and an interval for
    it that cannot leave the range ``[low, high]`` the quantity lives in (a
    count or a rate cannot go below 0, a share above 1).

    The symmetric t interval of a small sample of counts can: 5 trials of 0,
    12, 40, 90 and 105 acquisitions give the mean 49.4 with the t interval
    [-8.4, 107.2]. Here the interval is formed on a scale where the bound is
    out of reach and mapped back (the delta method: the standard error of the
    mean divided by the slope of the transform at the mean), so it is
    asymmetric near a bound and matches the t interval far from it:

    * no bound: the Student-t interval (as [`t_interval`][vcpulab.analysis.t_interval]);
    * one bound: the t interval of ``log(mean - low)`` (or of ``log(high - mean)``);
    * both: the t interval of ``logit((mean - low) / (high - low))``.

    A mean on its bound (every value there) gives the point interval
    ``[mean, mean]``. NaN bounds with fewer than two finite values, all NaN
    with none; NaN and infinite values are left out, as in ``t_interval``.
    A value outside ``[low, high]`` raises ValueError: the range is wrong.

        >>> from vcpulab.analysis import bounded_interval
        >>> m, lo, hi = bounded_interval([0, 12, 40, 90, 105], low=0)
        >>> round(m, 1), round(lo, 1), round(hi, 1)
        (49.4, 15.3, 159.2)
    """
    _check_fraction("confidence", confidence)
    lo_b = None if low is None else check_float("low", low, -float("inf"), float("inf"))
    hi_b = None if high is None else check_float("high", high, -float("inf"), float("inf"))
    if lo_b is not None and hi_b is not None and not lo_b < hi_b:
        raise ValueError(f"bounded_interval: low ({lo_b}) must be below high ({hi_b})")
    x = np.asarray(values, dtype=float).ravel()
    x = x[np.isfinite(x)]
    if (lo_b is not None and (x < lo_b).any()) or (hi_b is not None and (x > hi_b).any()):
        raise ValueError(
            f"bounded_interval: values {x.min()}..{x.max()} leave the range [{lo_b}, {hi_b}] "
            "the quantity is said to live in"
        )
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(x.mean())
    if x.size < 2:
        return m, float("nan"), float("nan")
    se = float(x.std(ddof=1)) / float(np.sqrt(x.size))
    t = t_critical(confidence, x.size - 1)
    if lo_b is None and hi_b is None:
        return m, m - t * se, m + t * se
    if lo_b is not None and hi_b is not None:
        span = hi_b - lo_b
        p = (m - lo_b) / span
        if p <= 0.0 or p >= 1.0:
            return m, m, m
        z = np.log(p / (1 - p))
        h = t * (se / span) / (p * (1 - p))
        a, b = 1 / (1 + np.exp(-(z - h))), 1 / (1 + np.exp(-(z + h)))
        return m, float(lo_b + span * a), float(lo_b + span * b)
    if lo_b is not None:
        d = m - lo_b
        if d <= 0.0:
            return m, m, m
        f = float(np.exp(t * se / d))
        return m, lo_b + d / f, lo_b + d * f
    assert hi_b is not None
    d = hi_b - m
    if d <= 0.0:
        return m, m, m
    f = float(np.exp(t * se / d))
    return m, hi_b - d * f, hi_b - d / f


def mean_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The t-interval of the mean of ``values`` (Student's t with n-1 degrees
    of freedom, scipy): valid for small n when the values are roughly
    normal; (nan, nan) with fewer than 2 values."""
    _check_fraction("confidence", confidence)
    if not isinstance(values, np.ndarray):
        items = check_seq("values", values, "numbers")
        if any(isinstance(i, (bool, str, bytes)) or not isinstance(i, numbers.Real) for i in items):
            raise TypeError(f"values must hold numbers, got {items!r}")
        values = items
    v = np.asarray(values, dtype=float)
    if v.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {v.shape}")
    if len(v) < 2:
        return (float("nan"), float("nan"))
    half = t_critical(confidence, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return (float(v.mean() - half), float(v.mean() + half))


def _welch(va: np.ndarray, vb: np.ndarray) -> tuple[float, float]:
    """(standard error of mean_b - mean_a, Welch-Satterthwaite degrees of freedom)."""
    qa, qb = va.var(ddof=1) / len(va), vb.var(ddof=1) / len(vb)
    se2 = qa + qb
    if se2 == 0:
        return 0.0, float(len(va) + len(vb) - 2)
    dof = se2**2 / (qa**2 / (len(va) - 1) + qb**2 / (len(vb) - 1))
    return float(np.sqrt(se2)), float(dof)


def compare(
    a: Sequence[float] | pl.DataFrame,
    b: Sequence[float] | pl.DataFrame,
    metric: str | None = None,
    *,
    paired: bool = False,
    pair_by: str | None = None,
    interval: Interval = "t",
    alpha: float = 0.05,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    alternative: Literal["two-sided", "greater", "less"] = "two-sided",
    seed: int = 0,
) -> Comparison:
    """Compare a metric between two sets of runs.

    ``a`` and ``b`` are values (one per seed/repetition) or DataFrames with a
    ``metric`` column. ``alternative="greater"`` tests B > A.

    * Design: unpaired by default. ``paired=True`` pairs the values by
      position; ``pair_by="seed"`` pairs DataFrame rows by that column (the
      simulator's runs with one seed share their random draws, so pairing
      removes that noise).
    * p-value: a permutation test of the difference in means — relabelling
      runs (unpaired) or flipping the signs of the paired differences —, exact
      when there are at most ``n_resamples`` relabellings, Monte Carlo
      otherwise (with the +1 correction). ``min_p_value`` is the smallest
      p-value the design can give; when it is not below ``alpha`` a
      [`LowPowerWarning`][vcpulab.analysis.LowPowerWarning] says so (add runs, or read the interval).
    * Interval of the difference, fit for small n: ``"t"`` (default; Welch's
      t-interval unpaired, the paired t-interval paired, scipy's t
      distribution), ``"bca"`` (bias-corrected accelerated bootstrap, scipy)
      or ``"percentile"`` (plain bootstrap; too narrow for small n).
      ``relative_ci`` is the interval of the relative change.
    * Effect size: Cohen's d (unpaired) or d_z (paired).

    Deterministic for a given ``seed``.
    """
    n_resamples = check_int("n_resamples", n_resamples, 100, MAX_RESAMPLES)
    _check_fraction("confidence", confidence)
    _check_fraction("alpha", alpha)
    check_int("seed", seed, 0)
    check_bool("paired", paired)
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")
    if interval not in ("t", "bca", "percentile"):
        raise ValueError(f"interval must be 't', 'bca' or 'percentile', got {interval!r}")
    if pair_by is not None:
        va, vb = _paired_values(a, b, metric, pair_by)
        paired = True
    else:
        va, vb = _values(a, metric, "a"), _values(b, metric, "b")
    if paired and len(va) != len(vb):
        raise ValueError(f"compare: paired runs need as many values on each side, got {len(va)} and {len(vb)}")
    rng = np.random.default_rng(seed)
    na, nb = len(va), len(vb)
    diff = float(vb.mean() - va.mean())

    def stat(d: np.ndarray) -> np.ndarray:
        if alternative == "two-sided":
            return np.abs(d)
        return d if alternative == "greater" else -d

    observed = stat(np.array([diff]))[0]
    tol = 1e-12 * max(1.0, abs(diff))
    if paired:
        dv = vb - va
        if 2**na <= n_resamples:
            signs = ((np.arange(2**na)[:, None] >> np.arange(na)) & 1) * 2 - 1
            perm = stat((signs * dv).mean(axis=1))
            p = float(np.mean(perm >= observed - tol))
            min_p = float(np.mean(perm >= perm.max() - tol))
        else:
            signs = rng.choice([-1.0, 1.0], (n_resamples, na))
            perm = stat((signs * dv).mean(axis=1))
            p = float((np.sum(perm >= observed - tol) + 1) / (n_resamples + 1))
            min_p = 1 / (n_resamples + 1)
    else:
        pooled = np.concatenate([va, vb])
        if comb(na + nb, na) <= n_resamples:
            from itertools import combinations

            diffs = []
            for ca in combinations(range(na + nb), na):
                mask = np.zeros(na + nb, bool)
                mask[list(ca)] = True
                diffs.append(pooled[~mask].mean() - pooled[mask].mean())
            perm = stat(np.array(diffs))
            p = float(np.mean(perm >= observed - tol))
            min_p = float(np.mean(perm >= perm.max() - tol))
        else:
            perms = np.array([rng.permutation(pooled) for _ in range(n_resamples)])
            perm = stat(perms[:, na:].mean(axis=1) - perms[:, :na].mean(axis=1))
            p = float((np.sum(perm >= observed - tol) + 1) / (n_resamples + 1))
            min_p = 1 / (n_resamples + 1)
    if min_p >= alpha:
        design = f"{na} pairs" if paired else f"{na} vs {nb} runs"
        warnings.warn(
            f"compare({metric or 'value'}): with {design} the permutation test cannot give p below {min_p:.3g} "
            f"(alpha = {alpha}); add runs{'' if paired else ' or pair them (pair_by=...)'} — the "
            f"{confidence:.0%} interval still shows the size and sign of the difference",
            LowPowerWarning,
            stacklevel=2,
        )
    lo, hi = _diff_interval(va, vb, paired, interval, confidence, n_resamples, rng)
    rel = diff / va.mean() if va.mean() != 0 else float("nan")
    rel_ci = _relative_interval(va, vb, paired, confidence)
    if paired and na > 1:
        sd = (vb - va).std(ddof=1)
        d = float(diff / sd) if sd > 0 else (0.0 if diff == 0 else float("inf") * np.sign(diff))
    elif na > 1 and nb > 1:
        sp = np.sqrt(((na - 1) * va.var(ddof=1) + (nb - 1) * vb.var(ddof=1)) / (na + nb - 2))
        d = float(diff / sp) if sp > 0 else (0.0 if diff == 0 else float("inf") * np.sign(diff))
    else:
        d = float("nan")
    return Comparison(
        metric=metric or "value",
        n_a=na,
        n_b=nb,
        mean_a=float(va.mean()),
        mean_b=float(vb.mean()),
        difference=diff,
        relative=float(rel),
        effect_size=d,
        p_value=min(p, 1.0),
        ci=(float(lo), float(hi)),
        confidence=confidence,
        n_resamples=n_resamples,
        paired=paired,
        interval=interval,
        min_p_value=min(min_p, 1.0),
        relative_ci=rel_ci,
        alpha=alpha,
    )


def _diff_interval(
    va: np.ndarray,
    vb: np.ndarray,
    paired: bool,
    interval: str,
    confidence: float,
    n_resamples: int,
    rng: np.random.Generator,
) -> tuple[float, float]:
    na, nb = len(va), len(vb)
    diff = vb.mean() - va.mean()
    if interval == "t":
        if paired:
            return mean_interval(vb - va, confidence)
        if na < 2 or nb < 2:
            return (float("nan"), float("nan"))
        se, dof = _welch(va, vb)
        half = t_critical(confidence, dof) * se
        return (float(diff - half), float(diff + half))
    if interval == "percentile":
        if paired:
            dv = vb - va
            boots = rng.choice(dv, (n_resamples, na)).mean(axis=1)
        else:
            boots = rng.choice(vb, (n_resamples, nb)).mean(axis=1) - rng.choice(va, (n_resamples, na)).mean(axis=1)
        lo, hi = np.quantile(boots, [(1 - confidence) / 2, 1 - (1 - confidence) / 2])
        return (float(lo), float(hi))
    from scipy import stats

    if (paired and np.ptp(vb - va) == 0) or (not paired and np.ptp(va) == 0 and np.ptp(vb) == 0):
        return (float(diff), float(diff))  # no spread: the bootstrap distribution is a point
    if paired:
        data: tuple[np.ndarray, ...] = (vb - va,)

        def statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
            return np.mean(x, axis=axis)
    else:
        data = (va, vb)

        def statistic(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:  # type: ignore[misc]
            return np.mean(y, axis=axis) - np.mean(x, axis=axis)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # degenerate resamples of tiny samples
        res = stats.bootstrap(
            data,
            statistic,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method="BCa",
            rng=rng,
            vectorized=True,
            paired=False,
        )
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def _relative_interval(va: np.ndarray, vb: np.ndarray, paired: bool, confidence: float) -> tuple[float, float]:
    nan = (float("nan"), float("nan"))
    if paired:
        if np.any(va == 0):
            return nan
        return mean_interval(vb / va - 1, confidence)
    ma, mb = va.mean(), vb.mean()
    if ma == 0 or len(va) < 2 or len(vb) < 2:
        return nan
    # delta method for R = mb / ma: var(R) ~ R^2 (var_b / (nb mb^2) + var_a / (na ma^2))
    qa, qb = va.var(ddof=1) / len(va), vb.var(ddof=1) / len(vb)
    r = mb / ma
    se = abs(r) * np.sqrt((qb / mb**2 if mb != 0 else 0.0) + qa / ma**2)
    _, dof = _welch(va, vb)
    half = t_critical(confidence, dof) * se
    return (float(r - 1 - half), float(r - 1 + half))


def stat_deltas(run: Any, stats: Sequence[str] | None = None) -> pl.DataFrame:
    """Tidy per-interval KVM stat deltas of a real-KVM Run: one row per
    (vm, vcpu, interval end, stat) with the delta and the rate per second."""
    if stats is not None:
        stats = check_seq("stats", stats, "stat names (None: every one)", min_len=1)
    d = run.deltas()
    keys = ["vm", "vcpu", "t_ns", "dt_ns"]
    cols = list(stats) if stats is not None else [c for c in d.columns if c not in keys]
    missing = [c for c in cols if not isinstance(c, str) or c not in d.columns]
    if missing:
        raise ValueError(f"unknown stats {missing}")
    long = d.select(keys + cols).unpivot(index=keys, on=cols, variable_name="stat", value_name="delta")
    return long.with_columns((pl.col("delta") / (pl.col("dt_ns") / 1e9)).alias("per_s")).sort(
        ["vm", "vcpu", "stat", "t_ns"]
    )


def time_breakdown(result: Any, by: Literal["vcpu", "vm"] = "vcpu") -> pl.DataFrame:
    """Where time went, tidy: one row per (vm[, vcpu], category) with ns and
    the fraction of that vCPU's (or VM's) time, from a simulator Result."""
    if by not in ("vcpu", "vm"):
        raise ValueError(f"by must be 'vcpu' or 'vm', got {by!r}")
    df = getattr(result, "vcpus", result)
    cats = [c for c in _frames.TIME_CATEGORIES if c in df.columns]
    keys = ["vm", "vcpu"] if by == "vcpu" else ["vm"]
    if by == "vm":
        df = df.group_by("vm").agg([pl.col(c).sum() for c in cats])
    long = df.select(keys + cats).unpivot(index=keys, on=cats, variable_name="category", value_name="ns")
    return long.with_columns(
        (pl.col("ns") / pl.col("ns").sum().over(keys)).alias("fraction"),
        pl.col("category").str.replace("_ns$", ""),
    ).sort(keys + ["category"])


def gang_share(result: Any, step_ns: int = 20_000, skip_frac: float = 0.5) -> float:
    """How gang-like a simulated run's schedule is: the share of (VM,
    instant) samples at which a VM runs all or none of its vCPUs, sampled
    every ``step_ns`` over the trace after its first ``skip_frac`` (the
    warm-up and start-up). Gang scheduling gives about 1; VMs whose vCPUs
    are scheduled independently give much less (8 VMs x 20 vCPUs on 80 CPUs
    under the 6.x era's EEVDF: 0.01-0.29). ``result``: a ``sim.Result`` run
    with ``trace=True``; ValueError if it has no trace or the arguments are
    out of range."""
    tr = getattr(result, "trace", None)
    vc = getattr(result, "vcpus", None)
    if tr is None or vc is None:
        raise ValueError("gang_share needs a sim.Result run with trace=True")
    if isinstance(step_ns, bool) or not isinstance(step_ns, numbers.Integral) or step_ns <= 0:
        raise ValueError(f"step_ns must be a positive int, got {step_ns!r}")
    step_ns = check_int("step_ns", step_ns, 1, 10**12)
    check_float("skip_frac", skip_frac, 0.0, 1.0)
    if not 0.0 <= skip_frac < 1.0:
        raise ValueError(f"skip_frac must be in [0, 1), got {skip_frac!r}")
    tr = tr.filter(pl.col("vm") >= 0)
    if tr.height == 0:
        raise ValueError("the trace holds no vCPU slices")
    sizes = dict(vc.group_by("vm").len().iter_rows())
    lo, hi = int(tr["start_ns"].min()), int(tr["end_ns"].max())  # type: ignore[arg-type]
    ts = np.arange(lo + int((hi - lo) * skip_frac), hi, step_ns)
    shares = []
    for (vm,), g in tr.group_by("vm"):
        running = np.searchsorted(np.sort(g["start_ns"].to_numpy()), ts, "right") - np.searchsorted(
            np.sort(g["end_ns"].to_numpy()), ts, "right"
        )
        shares.append(np.mean((running == 0) | (running == sizes[vm])))
    return float(np.mean(shares))


def _traced_frame(run: Any, frame: str) -> pl.DataFrame:
    """The ``frame`` frame (exits, halts, wakeups, trace) of a traced real
    run, or ``run`` itself where it is already that frame; ValueError naming
    what is missing otherwise."""
    df = getattr(run, frame, run)
    if df is None:
        raise ValueError(f"this run has no {frame} frame: run it with trace=True (docs/tracing.md)")
    if not isinstance(df, pl.DataFrame):
        raise TypeError(f"expected a traced Run or its {frame} frame, got {type(run).__name__}")
    return df


def _distribution(name: str) -> list[pl.Expr]:
    """Aggregations of the ns column ``{name}_ns``: mean, p50, p90, p99 (nearest
    rank, Int64) and max, named ``{name}_mean_ns`` … ``{name}_max_ns``."""
    c = pl.col(f"{name}_ns")
    return [
        c.mean().alias(f"{name}_mean_ns"),
        *(
            c.quantile(q, "nearest").cast(pl.Int64).alias(f"{name}_p{p}_ns")
            for q, p in ((0.5, 50), (0.9, 90), (0.99, 99))
        ),
        c.max().alias(f"{name}_max_ns"),
    ]


def exits_by_reason(run: Any, by_vcpu: bool = False) -> pl.DataFrame:
    """Exits of a traced real run (``run(..., trace=True)``, or its ``exits``
    frame) per exit reason, the ``kvm_stat``/``perf kvm stat`` view: count,
    share of all exits, and handling time (``kvm_exit`` to the next
    ``kvm_entry``, docs/tracing.md) as mean, p50, p90, p99 and max, ns. Exits
    whose entry fell outside the trace are counted but have no handling time.
    ``by_vcpu`` adds vm and vcpu to the key. Sorted by count, largest first."""
    check_bool("by_vcpu", by_vcpu)
    e = _traced_frame(run, "exits")
    keys = (["vm", "vcpu"] if by_vcpu else []) + ["reason"]
    out = e.group_by(keys).agg(pl.len().cast(pl.Int64).alias("count"), *_distribution("handling"))
    out = out.with_columns((pl.col("count") / max(e.height, 1)).alias("share"))
    return out.select(
        keys
        + [
            "count",
            "share",
            "handling_mean_ns",
            "handling_p50_ns",
            "handling_p90_ns",
            "handling_p99_ns",
            "handling_max_ns",
        ]
    ).sort(["count"] + keys, descending=[True] + [False] * len(keys))


def wakeup_latency(run: Any) -> pl.DataFrame:
    """Wake-up-to-run latency of each vCPU thread of a traced real run (its
    ``wakeups`` frame): count, mean, p50, p90, p99 and max, ns, per (vm, vcpu, tid)."""
    w = _traced_frame(run, "wakeups")
    return (
        w.group_by(["vm", "vcpu", "tid"])
        .agg(pl.len().cast(pl.Int64).alias("count"), *_distribution("latency"))
        .sort(["vm", "vcpu"])
    )
