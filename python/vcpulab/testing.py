"""Assertions for experiment frames, for tests written the way a user would.

    from vcpulab.testing import assert_between, assert_monotonic
    assert_between(r.steal_fraction(), "steal_fraction", 0.3, 0.7)   # r: a vcpulab.experiment.Run

Each failure names the column, the bound and the offending rows.

Real-KVM timing results depend on what else the machine runs. [`remeasure`][vcpulab.testing.remeasure]
checks a measurement's [`Quality`][vcpulab.quality.Quality] before trusting a
failed check: a failure on a clean run fails the test; a failure on a
disturbed run is measured again, a bounded number of times, and if every try
was disturbed the test is skipped with the measured disturbance as the reason::

    import polars as pl
    from vcpulab.experiment import MsiPingPong, run
    from vcpulab.testing import remeasure

    def test_polling_catches_wakeups(kvm_host):
        def check(r):
            polled, halts = r.deltas().select(pl.sum("halt_successful_poll"), pl.sum("halt_exits")).row(0)
            assert polled > 0.5 * halts, f"{polled} of {halts} halts polled"
        remeasure(lambda: run(MsiPingPong(gap_us=50), vcpus=1, pcpus=[1], halt_poll_ns=200_000,
                              warn_quality=False),
                  check, quality=lambda r: r.quality)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import polars as pl

__all__ = ["assert_between", "assert_equal_columns", "assert_monotonic", "remeasure", "REMEASURES"]

T = TypeVar("T")

#: test name → number of measurements each call of [`remeasure`][vcpulab.testing.remeasure] made
#: (1 = the first was trusted); the pytest plugin prints them at the end
REMEASURES: dict[str, list[int]] = {}


def remeasure(
    measure: Callable[[], T],
    check: Callable[[T], None],
    quality: Callable[[T], Any],
    tries: int = 3,
    *,
    pass_when_disturbed: bool = True,
    name: str | None = None,
) -> T:
    """Measure, check the quality, assert; re-measure at most ``tries`` times.

    Each try calls ``measure()``, then ``quality(result)`` (a
    [`Quality`][vcpulab.quality.Quality]). A clean measurement is checked with
    ``check(result)`` and its verdict is final (an ``AssertionError`` fails
    the test). A disturbed one is checked too: when the check passes and
    ``pass_when_disturbed`` is true (the property is one that other load can
    only make fail, e.g. "at least half the halts were polled"), that is
    final; otherwise the measurement is repeated. After ``tries`` disturbed
    measurements the test is skipped (``pytest.skip``), naming the last
    measured disturbance and the last failure. Returns the accepted result.
    """
    import pytest

    if tries < 1:
        raise ValueError(f"tries must be >= 1, got {tries}")
    key = name or os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    last = ""
    for i in range(1, tries + 1):
        r = measure()
        q = quality(r)
        if q is None or not getattr(q, "measured", True):
            raise ValueError("remeasure: quality(result) was not measured (a Run built by hand has no quality)")
        if not q.disturbed:
            REMEASURES.setdefault(key, []).append(i)
            check(r)
            return r
        try:
            check(r)
        except AssertionError as e:
            last = f"{e}".splitlines()[0] if str(e) else "assertion failed"
        else:
            if pass_when_disturbed:
                REMEASURES.setdefault(key, []).append(i)
                return r
            last = "passed, but disturbance could have made it pass"
        print(f"try {i}/{tries}: {q.line()} ({'; '.join(q.reasons)}); check: {last}")
        if i < tries:
            time.sleep(0.2)
    REMEASURES.setdefault(key, []).append(-tries)
    pytest.skip(f"disturbed in all {tries} measurements: {'; '.join(q.reasons)} (last check: {last})")


def _check(df: pl.DataFrame, column: str) -> None:
    if not isinstance(df, pl.DataFrame):
        raise TypeError(f"expected a polars DataFrame, got {type(df).__name__}")
    if column not in df.columns:
        raise AssertionError(f"column {column!r} is missing; the frame has {df.columns}")
    if df.height == 0:
        raise AssertionError(f"the frame is empty: nothing to check in {column!r}")


def _show(bad: pl.DataFrame, limit: int = 10) -> str:
    with pl.Config(tbl_rows=limit, tbl_cols=12):
        return str(bad.head(limit))


def assert_between(df: pl.DataFrame, column: str, lo: float | None = None, hi: float | None = None) -> None:
    """Every value of ``column`` lies in ``[lo, hi]`` (and is not null)."""
    _check(df, column)
    cond = pl.col(column).is_null()
    if lo is not None:
        cond = cond | (pl.col(column) < lo)
    if hi is not None:
        cond = cond | (pl.col(column) > hi)
    bad = df.filter(cond)
    if bad.height:
        raise AssertionError(f"{bad.height} of {df.height} rows have {column} outside [{lo}, {hi}]:\n{_show(bad)}")


def assert_monotonic(
    df: pl.DataFrame, column: str, by: Sequence[str] = ("vm", "vcpu"), order: str = "t_ns", strict: bool = False
) -> None:
    """``column`` never decreases (increases, with ``strict``) along ``order`` within each ``by`` group."""
    _check(df, column)
    keys = [k for k in by if k in df.columns]
    d = df.sort(keys + [order]).with_columns(pl.col(column).diff().over(keys or None).alias("_step"))
    bad = d.filter((pl.col("_step") <= 0) if strict else (pl.col("_step") < 0))
    if bad.height:
        raise AssertionError(
            f"{column} {'does not increase' if strict else 'decreases'} in {bad.height} steps:\n{_show(bad)}"
        )


def assert_equal_columns(df: pl.DataFrame, left: str, right: Any, *, rel: float = 0.0) -> None:
    """``df[left]`` equals ``right`` (another column name or a value), within ``rel``."""
    _check(df, left)
    rhs = pl.col(right) if isinstance(right, str) and right in df.columns else pl.lit(right)
    diff = (pl.col(left) - rhs).abs()
    bad = df.filter(diff > rel * rhs.abs()) if rel else df.filter(pl.col(left) != rhs)
    if bad.height:
        raise AssertionError(f"{bad.height} rows have {left} != {right}{f' (rel {rel})' if rel else ''}:\n{_show(bad)}")
