"""The one interruption contract of vcpulab's long calls.

Ctrl-C (SIGINT) during a long call — ``experiment.run`` and its repeats,
``twins.compare`` / ``twins.grid``, ``calibrate.halt_poll``,
``validation.validate`` / ``sensitivity``, ``sim.sweep`` — raises
`KeyboardInterrupt` within about a second, after every vCPU thread and
worker it started has stopped. The work that had finished is kept on the
exception as ``e.partial``, in the shape the call returns (a frame of the
finished rows, a [`Trials`][vcpulab.experiment.Trials] of the finished trials,
a grid of the finished cells); ``None`` when nothing had finished. One log
line (logger ``vcpulab.<call>``) says how much was kept::

    try:
        df = validation.validate()
    except KeyboardInterrupt as e:
        df = e.partial          # the cases whose every run had finished
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["keep_partial", "partial_of"]


def keep_partial(e: BaseException, partial: Any, *, call: str, done: int, total: int, unit: str) -> None:
    """Put ``partial`` on the interrupt ``e`` (``e.partial``) and log, under
    ``vcpulab.<call>``, how many of the ``total`` ``unit`` had finished."""
    e.partial = partial  # type: ignore[attr-defined]
    logging.getLogger(f"vcpulab.{call}").warning(
        "vcpulab.%s: interrupted; %d of %d %s had finished (kept in KeyboardInterrupt.partial)",
        call,
        done,
        total,
        unit,
    )


def partial_of(e: BaseException) -> Any:
    """What an interrupted inner call kept (``e.partial``), or None."""
    return getattr(e, "partial", None)
