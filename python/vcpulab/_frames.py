"""Frame conventions shared by every layer (real KVM, simulator, analysis).

* Key columns have one dtype everywhere: ``vm``, ``vcpu``, ``pcpu`` and
  ``last_pcpu`` are :data:`KEY_DTYPE` (``Int64``: a simulator trace marks a
  non-vCPU task with ``vm = vcpu = -1``), so frames from a real run and a
  simulated one join without casts.
* Every quantity names its unit in its column name (``_ns``, ``_us``,
  ``_s``, ``_frac``, ``_ops_s``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

__all__ = ["KEY_COLUMNS", "KEY_DTYPE", "frame", "with_key_dtypes"]

#: The integer type of every key column.
KEY_DTYPE = pl.Int64
#: Columns that identify a VM, a vCPU or a host CPU.
KEY_COLUMNS = ("vm", "vcpu", "pcpu", "last_pcpu")


def with_key_dtypes(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with its key columns (those present) cast to :data:`KEY_DTYPE`."""
    casts = [pl.col(c).cast(KEY_DTYPE) for c in KEY_COLUMNS if c in df.columns and df.schema[c] != KEY_DTYPE]
    return df.with_columns(casts) if casts else df


def frame(cols: Mapping[str, Any] | None) -> pl.DataFrame | None:
    """A frame from the extension's column dict (numpy arrays or lists), key
    columns as :data:`KEY_DTYPE`."""
    if cols is None:
        return None
    return with_key_dtypes(pl.DataFrame({k: (list(v) if isinstance(v, list) else v) for k, v in cols.items()}))
