"""Frame conventions shared by every layer (real KVM, simulator, analysis).

* Key columns have one dtype everywhere: ``vm``, ``vcpu``, ``pcpu`` and
  ``last_pcpu`` are `KEY_DTYPE` (``Int64``: a simulator trace marks a
  non-vCPU task with ``vm = vcpu = -1``), so frames from a real run and a
  simulated one join without casts.
* Every quantity names its unit in its column name (``_ns``, ``_us``,
  ``_s``, ``_frac``, ``_ops_s``).
* The simulator's time categories, the columns of a vCPU's (`TIME_CATEGORIES`)
  and a host CPU's (`PCPU_TIME_CATEGORIES`) frame that sum to the run's
  duration, read from the Rust engine; [`vcpulab.sim`][] re-exports them, and
  analysis and plot read them here (below the simulator: no import circle).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from vcpulab import _core

__all__ = ["KEY_COLUMNS", "KEY_DTYPE", "PCPU_TIME_CATEGORIES", "TIME_CATEGORIES", "frame", "with_key_dtypes"]

#: The integer type of every key column.
KEY_DTYPE = pl.Int64
#: Columns that identify a VM, a vCPU or a host CPU.
KEY_COLUMNS = ("vm", "vcpu", "pcpu", "last_pcpu")

#: Where a vCPU's time goes, the columns of [`Result.vcpus`][vcpulab.sim.Result] that sum to
#: the run's duration (useful work, lock spinning, PLE exits, other exits,
#: guest idle polling, host halt polling, runnable-but-waiting, halted).
#: Read from the Rust engine (``sim::metrics``), so it cannot drift.
TIME_CATEGORIES: tuple[str, ...] = tuple(_core.SIM_VCPU_TIME_CATEGORIES)
#: The same for a host CPU ([`Result.pcpus`][vcpulab.sim.Result]): running categories, then
#: background tasks and idle.
PCPU_TIME_CATEGORIES: tuple[str, ...] = tuple(_core.SIM_PCPU_TIME_CATEGORIES)


def with_key_dtypes(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with its key columns (those present) cast to `KEY_DTYPE`."""
    casts = [pl.col(c).cast(KEY_DTYPE) for c in KEY_COLUMNS if c in df.columns and df.schema[c] != KEY_DTYPE]
    return df.with_columns(casts) if casts else df


#: Bytes a row of a categorical column takes while it becomes strings (the
#: gather's 4-byte indices and polars' 16-byte string views).
_CAT_BYTES_PER_ROW = 4 + 16


def _reserve(cols: Mapping[str, Any]) -> None:
    """Ask for the memory the frame will allocate, where failing is a
    MemoryError: polars aborts the process when one of its allocations fails
    (numpy columns are taken without a copy; strings from categorical codes
    and key columns cast to Int64 are new)."""
    rows = max((len(v[0]) if isinstance(v, tuple) else len(v) for v in cols.values()), default=0)
    per_row = sum(
        _CAT_BYTES_PER_ROW
        if isinstance(v, tuple)
        else 8
        if k in KEY_COLUMNS and getattr(v, "dtype", None) != np.int64
        else 0
        for k, v in cols.items()
    )
    need = 2 * rows * per_row  # room for one temporary copy
    if need <= 1 << 26:
        return
    try:
        np.empty(need, dtype=np.uint8)
    except MemoryError:
        raise MemoryError(
            f"no memory to turn {rows} rows into a frame (~{need >> 20} MB); set a smaller trace_max_rows, shorten "
            "duration_ns or run without trace"
        ) from None


def _column(name: str, v: Any) -> Any:
    if isinstance(v, tuple):
        # a categorical column (codes, names): one byte a row across the boundary
        codes, names = v
        return pl.Series(name, names, dtype=pl.String).gather(codes)
    return list(v) if isinstance(v, list) else v


def frame(cols: Mapping[str, Any] | None) -> pl.DataFrame | None:
    """A frame from the extension's column dict (numpy arrays, lists, or
    ``(codes, names)`` tuples of a categorical column), key columns as
    `KEY_DTYPE`."""
    if cols is None:
        return None
    _reserve(cols)
    return with_key_dtypes(pl.DataFrame({k: _column(k, v) for k, v in cols.items()}))
