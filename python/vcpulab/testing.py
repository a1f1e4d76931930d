"""Assertions for experiment frames, for tests written the way a user would.

    from vcpulab.testing import assert_between, assert_monotonic
    assert_between(run.steal_fraction(), "steal_fraction", 0.3, 0.7)

Each failure names the column, the bound and the offending rows.
"""

from __future__ import annotations

from typing import Any, Sequence

import polars as pl

__all__ = ["assert_between", "assert_equal_columns", "assert_monotonic"]


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


def assert_monotonic(df: pl.DataFrame, column: str, by: Sequence[str] = ("vm", "vcpu"), order: str = "t_ns", strict: bool = False) -> None:
    """``column`` never decreases (increases, with ``strict``) along ``order`` within each ``by`` group."""
    _check(df, column)
    keys = [k for k in by if k in df.columns]
    d = df.sort(keys + [order]).with_columns(pl.col(column).diff().over(keys or None).alias("_step"))
    bad = d.filter((pl.col("_step") <= 0) if strict else (pl.col("_step") < 0))
    if bad.height:
        raise AssertionError(f"{column} {'does not increase' if strict else 'decreases'} in {bad.height} steps:\n{_show(bad)}")


def assert_equal_columns(df: pl.DataFrame, left: str, right: Any, *, rel: float = 0.0) -> None:
    """``df[left]`` equals ``right`` (another column name or a value), within ``rel``."""
    _check(df, left)
    rhs = pl.col(right) if isinstance(right, str) and right in df.columns else pl.lit(right)
    diff = (pl.col(left) - rhs).abs()
    bad = df.filter(diff > rel * rhs.abs()) if rel else df.filter(pl.col(left) != rhs)
    if bad.height:
        raise AssertionError(f"{bad.height} rows have {left} != {right}{f' (rel {rel})' if rel else ''}:\n{_show(bad)}")
