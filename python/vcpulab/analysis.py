"""Analysis helpers: A/B comparison with a permutation test, tidy KVM stat
deltas, time breakdowns.

The A/B discipline: run each variant several times (seeds in the simulator,
repetitions on real KVM), then ask whether the difference in a metric is larger
than the run-to-run noise::

    from vcpulab.analysis import compare
    c = compare(runs_a, runs_b, metric="throughput")
    c.p_value, c.effect_size, c.ci
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np
import polars as pl

__all__ = ["Comparison", "compare", "stat_deltas", "time_breakdown"]


@dataclass(frozen=True)
class Comparison:
    """Result of :func:`compare` (B relative to A)."""

    metric: str
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    #: mean_b - mean_a
    difference: float
    #: difference / mean_a (nan when mean_a is 0)
    relative: float
    #: Cohen's d with the pooled standard deviation (nan with < 2 values per side)
    effect_size: float
    #: permutation-test p-value for the difference in means
    p_value: float
    #: bootstrap percentile confidence interval of the difference
    ci: tuple[float, float]
    confidence: float
    n_resamples: int

    def significant(self, alpha: float = 0.05) -> bool:
        return self.p_value < alpha

    def __str__(self) -> str:
        return (
            f"{self.metric}: A {self.mean_a:.4g} (n={self.n_a}) vs B {self.mean_b:.4g} (n={self.n_b}); "
            f"B-A = {self.difference:.4g} ({self.relative:+.1%}), {self.confidence:.0%} CI "
            f"[{self.ci[0]:.4g}, {self.ci[1]:.4g}], d = {self.effect_size:.2f}, p = {self.p_value:.4f}"
        )


def _values(x: Any, metric: str | None) -> np.ndarray:
    if isinstance(x, pl.DataFrame):
        if metric is None:
            raise ValueError("compare: name the metric column when passing DataFrames")
        if metric not in x.columns:
            raise ValueError(f"compare: column {metric!r} not in the frame (columns: {x.columns})")
        v = x[metric].cast(pl.Float64).to_numpy()
    else:
        v = np.asarray(list(x), dtype=float)
    if v.ndim != 1 or len(v) == 0:
        raise ValueError("compare: each side needs at least one value")
    if not np.all(np.isfinite(v)):
        raise ValueError("compare: values must be finite (drop NaN/inf first)")
    return v


def compare(
    a: Sequence[float] | pl.DataFrame,
    b: Sequence[float] | pl.DataFrame,
    metric: str | None = None,
    *,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    alternative: Literal["two-sided", "greater", "less"] = "two-sided",
    seed: int = 0,
) -> Comparison:
    """Compare a metric between two sets of runs.

    ``a`` and ``b`` are values (one per seed/repetition) or DataFrames with a
    ``metric`` column. The p-value comes from a permutation test on the
    difference in means (exact when the number of relabellings is at most
    ``n_resamples``, Monte Carlo otherwise, with the +1 correction); the
    confidence interval from a percentile bootstrap of the difference; the
    effect size is Cohen's d. ``alternative="greater"`` tests B > A.
    Deterministic for a given ``seed``.
    """
    if n_resamples < 100:
        raise ValueError(f"n_resamples must be >= 100, got {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")
    va, vb = _values(a, metric), _values(b, metric)
    rng = np.random.default_rng(seed)
    diff = vb.mean() - va.mean()
    pooled = np.concatenate([va, vb])
    na, nb = len(va), len(vb)

    def stat(d: np.ndarray) -> np.ndarray:
        if alternative == "two-sided":
            return np.abs(d)
        return d if alternative == "greater" else -d

    observed = stat(np.array([diff]))[0]
    from math import comb

    if comb(na + nb, na) <= n_resamples:
        from itertools import combinations

        idx = np.arange(na + nb)
        diffs = []
        for ca in combinations(range(na + nb), na):
            mask = np.zeros(na + nb, bool)
            mask[list(ca)] = True
            diffs.append(pooled[~mask].mean() - pooled[mask].mean())
        perm = stat(np.array(diffs))
        p = float(np.mean(perm >= observed - 1e-12))
        del idx
    else:
        perms = np.array([rng.permutation(pooled) for _ in range(n_resamples)])
        perm = stat(perms[:, na:].mean(axis=1) - perms[:, :na].mean(axis=1))
        p = float((np.sum(perm >= observed - 1e-12) + 1) / (n_resamples + 1))
    boots = rng.choice(vb, (n_resamples, nb)).mean(axis=1) - rng.choice(va, (n_resamples, na)).mean(axis=1)
    lo, hi = np.quantile(boots, [(1 - confidence) / 2, 1 - (1 - confidence) / 2])
    if na > 1 and nb > 1:
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
        difference=float(diff),
        relative=float(diff / va.mean()) if va.mean() != 0 else float("nan"),
        effect_size=d,
        p_value=min(p, 1.0),
        ci=(float(lo), float(hi)),
        confidence=confidence,
        n_resamples=n_resamples,
    )


def stat_deltas(run: Any, stats: Sequence[str] | None = None) -> pl.DataFrame:
    """Tidy per-interval KVM stat deltas of a real-KVM Run: one row per
    (vm, vcpu, interval end, stat) with the delta and the rate per second."""
    d = run.deltas()
    keys = ["vm", "vcpu", "t_ns", "dt_ns"]
    cols = list(stats) if stats is not None else [c for c in d.columns if c not in keys]
    missing = [c for c in cols if c not in d.columns]
    if missing:
        raise ValueError(f"unknown stats {missing}")
    long = d.select(keys + cols).unpivot(index=keys, on=cols, variable_name="stat", value_name="delta")
    return long.with_columns((pl.col("delta") / (pl.col("dt_ns") / 1e9)).alias("per_s")).sort(["vm", "vcpu", "stat", "t_ns"])


def time_breakdown(result: Any, by: Literal["vcpu", "vm"] = "vcpu") -> pl.DataFrame:
    """Where time went, tidy: one row per (vm[, vcpu], category) with ns and
    the fraction of that vCPU's (or VM's) time, from a simulator Result."""
    from vcpulab.sim import TIME_CATEGORIES

    df = getattr(result, "vcpus", result)
    cats = [c for c in TIME_CATEGORIES if c in df.columns]
    keys = ["vm", "vcpu"] if by == "vcpu" else ["vm"]
    if by == "vm":
        df = df.group_by("vm").agg([pl.col(c).sum() for c in cats])
    long = df.select(keys + cats).unpivot(index=keys, on=cats, variable_name="category", value_name="ns")
    return long.with_columns(
        (pl.col("ns") / pl.col("ns").sum().over(keys)).alias("fraction"),
        pl.col("category").str.replace("_ns$", ""),
    ).sort(keys + ["category"])
