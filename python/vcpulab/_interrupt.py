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

One Ctrl-C, one `KeyboardInterrupt`: polars (since 1.22) hooks SIGINT itself
and raises `KeyboardInterrupt` from a query the signal lands in, while
Python's own handler stays pending and raises a second one at some later
line (pola-rs/polars#23988, https://github.com/pola-rs/polars/issues/23988).
The ``vcpulab`` command gives SIGINT back to Python
(``sigint_to_python`` below) before it runs a command. And polars turns a
`KeyboardInterrupt` raised while its Rust code calls back into Python into
a ``TypeError``: ``experiment.run`` builds the frames of a finished run with
Ctrl-C held (``held`` below), raising it once they are built.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["held", "keep_partial", "partial_of", "sigint_to_python"]


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


def sigint_to_python() -> bool:
    """Imports polars and puts CPython's own SIGINT handler back in the kernel,
    over the one polars registers when it is imported; True when it did (it
    can only in the main thread, while Python handles SIGINT).

    Without it, a Ctrl-C that lands inside a polars query raises
    `KeyboardInterrupt` twice: once from polars, and once more from Python's
    handler, still pending, at whatever line runs next (an ``except`` clause,
    a ``finally``, the code after a loop that caught the first one;
    pola-rs/polars#23988). With it, a polars query runs to its end (our frames
    take milliseconds) and the one `KeyboardInterrupt` comes after it. The
    Python-level handler (`signal.getsignal`) is unchanged; what the process
    loses is polars' own cancelling of a long query mid-way."""
    import polars  # noqa: F401  (its import registers the hook this replaces)

    if threading.current_thread() is not threading.main_thread():
        return False
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):  # SIG_IGN / SIG_DFL: Python does not raise KeyboardInterrupt anyway
        return False
    signal.signal(signal.SIGINT, handler)  # CPython's C handler, installed again with sigaction
    return True


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Holds Ctrl-C for a short block of frame building: a SIGINT that arrives
    in it raises `KeyboardInterrupt` as the block ends (at once if the block
    raised nothing else), not inside it.

    polars turns a `KeyboardInterrupt` raised while its Rust code calls back
    into Python into a ``TypeError`` ("'<unprintable str object>' is not a
    Polars data type", after an "Exception ignored" report): measured with
    ``experiment.run``'s frames of a finished run, which is where a Ctrl-C
    after the vCPUs stopped lands. So vcpulab builds its frames with Ctrl-C
    held. Only in the main thread, and only while SIGINT has Python's default
    handler (a program's own handler is left alone); installing the holding
    handler also takes SIGINT back from polars for the process, as
    ``sigint_to_python`` does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        yield
        return
    pending: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            raise KeyboardInterrupt
