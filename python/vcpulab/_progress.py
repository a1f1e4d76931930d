"""One progress bar for every long call (tqdm), on when asked, or by default
when stderr is a terminal (a notebook's tqdm.auto widget included), and a
no-op otherwise: CI logs and piped output stay clean."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from vcpulab._checks import check_bool


def wanted(progress: bool | None) -> bool:
    """``progress`` as given, or (None) whether stderr is a terminal or this
    runs in a Jupyter kernel."""
    if progress is not None:
        return check_bool("progress", progress)
    if "ipykernel" in sys.modules:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Bar:
    """``with Bar(total, desc, progress) as b: b.set(done)`` / ``b.update(1)``."""

    def __init__(self, total: int, desc: str, progress: bool | None) -> None:
        self._tq: Any = None
        if wanted(progress) and total > 0:
            from tqdm.auto import tqdm

            self._tq = tqdm(total=total, desc=desc, leave=False)

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._tq is not None:
            self._tq.close()

    def update(self, n: int = 1) -> None:
        if self._tq is not None:
            self._tq.update(n)

    def write(self, line: str) -> None:
        """A line above the bar (tqdm.write, on stderr); nothing without a bar."""
        if self._tq is not None:
            from tqdm.auto import tqdm

            tqdm.write(line, file=sys.stderr)

    def set(self, done: int) -> None:
        """Set the count (a callback from Rust reports the points done so far)."""
        if self._tq is not None:
            self._tq.n = done
            self._tq.refresh()
