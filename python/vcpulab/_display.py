"""Small HTML summaries for Jupyter (``_repr_html_``)."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any


def table(title: str, rows: Iterable[tuple[str, Any]], frames: Iterable[tuple[str, Any]] = ()) -> str:
    """A titled key/value table, optionally followed by polars frames."""
    body = "".join(
        f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(str(k))}</th>"
        f"<td style='text-align:left'>{html.escape(_fmt(v))}</td></tr>"
        for k, v in rows
    )
    out = f"<div><b>{html.escape(title)}</b><table>{body}</table>"
    for name, df in frames:
        if df is not None:
            out += f"<details><summary>{html.escape(name)} ({df.height} rows)</summary>{df._repr_html_()}</details>"
    return out + "</div>"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    if isinstance(v, (set, frozenset)):
        return ", ".join(sorted(map(str, v))) or "—"
    return str(v)
