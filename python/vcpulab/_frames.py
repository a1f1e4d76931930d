"""Frame conventions shared by every layer (real KVM, simulator, analysis).

* Key columns have one dtype everywhere: ``vm``, ``vcpu``, ``pcpu`` and
  ``last_pcpu`` are `KEY_DTYPE` (``Int64``: a simulator trace marks a
  non-vCPU task with ``vm = vcpu = -1``), so frames from a real run and a
  simulated one join without casts. One exception: a simulator trace,
  whose rows number in millions, keeps its keys as `TRACE_KEY_DTYPE`
  (``Int32``) and its ``why`` as a ``pl.Enum`` (29 bytes a row with polars'
  one-byte enums, 32 with older polars' four-byte ones; ``Int64`` keys and
  strings took 56). polars joins and compares ``Int32`` with ``Int64`` keys
  as it does equal ones (it casts both to ``Int64``).
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

__all__ = [
    "KEY_COLUMNS",
    "KEY_DTYPE",
    "PCPU_TIME_CATEGORIES",
    "TIME_CATEGORIES",
    "TRACE_KEY_DTYPE",
    "frame",
    "with_key_dtypes",
]

#: The integer type of every key column.
KEY_DTYPE = pl.Int64
#: The integer type of a simulator trace's key columns (4 bytes a row each).
TRACE_KEY_DTYPE = pl.Int32
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


def with_key_dtypes(df: pl.DataFrame, key_dtype: Any = KEY_DTYPE) -> pl.DataFrame:
    """``df`` with its key columns (those present) cast to ``key_dtype``
    (`KEY_DTYPE`; a simulator trace's are `TRACE_KEY_DTYPE`)."""
    casts = [pl.col(c).cast(key_dtype) for c in KEY_COLUMNS if c in df.columns and df.schema[c] != key_dtype]
    return df.with_columns(casts) if casts else df


#: Bytes a row of a categorical column takes while it becomes an enum (the
#: gathered slices and their concatenation: one byte a row each with
#: polars' small enums, four with older polars').
_CAT_BYTES_PER_ROW = 2 * 4
#: Rows of a categorical column gathered at a time.
_GATHER_ROWS = 1 << 20
#: Address space polars maps at its first parallel operation (its thread
#: pool's stacks and allocator arenas: 460-520 MB measured here, polars 2.1,
#: 2 CPUs), asked for beside a large frame's own bytes: where address space
#: is what runs out (RLIMIT_AS), that mapping fails inside polars, which
#: aborts the process. Only asked for, never touched: it costs no memory.
_POLARS_ADDRESS_SPACE = 512 << 20


def _reserve(cols: Mapping[str, Any], key_dtype: Any) -> None:
    """Ask for the memory the frame will allocate, where failing is a
    MemoryError: polars aborts the process when one of its allocations fails
    (numpy columns are taken without a copy; an enum from categorical codes
    and key columns cast to ``key_dtype`` are new)."""
    key_np = pl.Series([], dtype=key_dtype).to_numpy().dtype
    rows = max((len(v[0]) if isinstance(v, tuple) else len(v) for v in cols.values()), default=0)
    per_row = sum(
        _CAT_BYTES_PER_ROW
        if isinstance(v, tuple)
        else key_np.itemsize
        if k in KEY_COLUMNS and getattr(v, "dtype", None) != key_np
        else 0
        for k, v in cols.items()
    )
    need = 2 * rows * per_row  # room for one temporary copy
    if need <= 1 << 26:
        return
    try:
        np.empty(need + _POLARS_ADDRESS_SPACE, dtype=np.uint8)
    except MemoryError:
        raise MemoryError(
            f"no memory to turn {rows} rows into a frame (~{need >> 20} MB, and ~{_POLARS_ADDRESS_SPACE >> 20} MB "
            "of address space for polars' threads); set a smaller trace_max_rows, shorten "
            "duration_ns or run without trace"
        ) from None


def _column(name: str, v: Any) -> Any:
    if isinstance(v, tuple):
        # a categorical column (codes, names): one byte a row across the
        # boundary, an enum of those names in the frame
        codes, names = v
        cats = pl.Series(name, names, dtype=pl.Enum(names))
        if len(codes) <= _GATHER_ROWS:
            return cats.gather(codes)
        # in slices: a whole gather takes ~14 bytes a row of temporaries
        # (wider indices), more than the trace's other columns together
        parts = [cats.gather(codes[i : i + _GATHER_ROWS]) for i in range(0, len(codes), _GATHER_ROWS)]
        return pl.concat(parts, rechunk=True)
    # lists as they are; numpy arrays polars takes without copying them
    return list(v) if isinstance(v, list) else v


def frame(cols: Mapping[str, Any] | None, *, key_dtype: Any = KEY_DTYPE) -> pl.DataFrame | None:
    """A frame from the extension's column dict (numpy arrays, lists, or
    ``(codes, names)`` tuples of a categorical column, which become a
    ``pl.Enum``), key columns as ``key_dtype`` (`KEY_DTYPE`, or a simulator
    trace's `TRACE_KEY_DTYPE`). Numeric columns share the arrays' memory."""
    if cols is None:
        return None
    _reserve(cols, key_dtype)
    return with_key_dtypes(pl.DataFrame({k: _column(k, v) for k, v in cols.items()}), key_dtype)
