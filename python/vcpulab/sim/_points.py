"""The points of a sweep: one expansion shared by the local sweep
([`vcpulab.sim.sweep`][]) and the checkpointed / distributed one
([`vcpulab.sim.distributed`][])."""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vcpulab.sim import policies, presets
from vcpulab.sim._config import Config, Policy

__all__ = ["MAX_SWEEP_POINTS", "Point", "expand", "grid_json", "param_value", "resolve_named"]

Point = tuple[dict[str, Any], Config]

#: The most points a sweep expands unless told otherwise (``max_points=``):
#: a point's Config takes ~2 KB and ~0.2 ms to build, so 100,000 points are
#: ~200 MB and ~20 s before the first one runs. A grid above it is refused up
#: front, naming its size; pass ``max_points=N`` (or None) to lift it.
MAX_SWEEP_POINTS = 100_000


def param_value(v: Any) -> Any:
    """A grid value as a parameter column: a Policy as its label (its
    constructor's name, [`vcpulab.sim.policies.label`][]), a named object as
    its name, plain values as they are."""
    if isinstance(v, Policy):
        return policies.label(v)
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    item = getattr(v, "item", None)
    if isinstance(v, numbers.Number) and callable(item):
        return item()  # a numpy scalar (np.arange): its number, not its repr
    if hasattr(v, "name") and isinstance(v.name, str):
        return v.name
    return repr(v)


def resolve_named(path: str, value: Any) -> Any:
    """A grid value given by name: at a ``…policy`` path a policy name of
    [`vcpulab.sim.policies.NAMES`][], at a ``…workload`` path a preset of
    [`vcpulab.sim.presets.NAMES`][]; anything else unchanged."""
    if not isinstance(value, str):
        return value
    leaf = path.rsplit(".", 1)[-1]
    try:
        if leaf == "policy":
            return policies.by_name(value)
        if leaf == "workload":
            return presets.by_name(value)
    except ValueError as e:
        raise ValueError(f"grid {path!r}: {e}") from None
    return value


def check_max_points(max_points: Any) -> int | None:
    """``max_points`` as given (an int >= 1, or None: no bound), else ValueError."""
    if max_points is None:
        return None
    if isinstance(max_points, bool) or not isinstance(max_points, numbers.Integral) or max_points < 1:
        raise ValueError(f"sweep: max_points must be an int >= 1 or None (no bound), got {max_points!r}")
    return int(max_points)


def _too_many(n: int | str, max_points: int, what: str) -> ValueError:
    return ValueError(
        f"sweep: {what} has {n} points, more than max_points={max_points} (each point's Config takes ~2 KB before "
        f"any runs); pass max_points=N or max_points=None to sweep it anyway, or split it"
    )


def expand(
    points: Config | Sequence[Config] | Sequence[tuple[Mapping[str, Any], Config]],
    grid: Mapping[str, Iterable[Any]] | None = None,
    max_points: int | None = MAX_SWEEP_POINTS,
) -> list[Point]:
    """The (params, Config) points of a sweep, in order, with their parameter
    columns: a grid's cartesian product over dotted paths (policy and
    workload names accepted, see `resolve_named`), a list of Configs
    numbered by ``point``, or your own (params, Config) pairs.

    A sweep of more than ``max_points`` points ([`MAX_SWEEP_POINTS`][vcpulab.sim.MAX_SWEEP_POINTS];
    None: no bound) is refused with a ValueError before any is built."""
    max_points = check_max_points(max_points)
    labelled: list[Point] = []
    if grid is not None and not isinstance(grid, Mapping):
        raise TypeError(
            f"sweep: grid must map dotted config paths to lists of values, got {type(grid).__name__} {grid!r}"
        )
    if isinstance(points, Config):
        base = points
        if grid is None:
            return [({"point": 0}, base)]
        keys = list(grid)
        axes = []
        for k in keys:
            if not isinstance(k, str):
                raise TypeError(f"sweep: grid keys must be dotted config paths (str), got {type(k).__name__} {k!r}")
            vs = grid[k]
            if isinstance(vs, (str, bytes, bytearray, Mapping)) or not isinstance(vs, Iterable):
                raise TypeError(f"sweep: grid axis {k!r} must be a list of values, got {type(vs).__name__} {vs!r}")
            # an axis is read only as far as the bound (it may be a generator)
            axis = list(vs) if max_points is None else list(itertools.islice(iter(vs), max_points + 1))
            if max_points is not None and len(axis) > max_points:
                raise _too_many(f"more than {max_points}", max_points, f"the grid's axis {k!r} alone")
            if not axis:
                raise ValueError(f"sweep: grid axis {k!r} is empty (a grid with it would have no points)")
            axes.append(axis)
        total = math.prod(len(a) for a in axes)
        if max_points is not None and total > max_points:
            dims = " x ".join(str(len(a)) for a in axes)
            raise _too_many(f"{total} ({dims})", max_points, "the grid")
        values = [[resolve_named(k, v) for v in axis] for k, axis in zip(keys, axes)]
        for combo in itertools.product(*values):
            c = base
            for k, v in zip(keys, combo):
                c = c.with_path(k, v)
            labelled.append(({k: param_value(v) for k, v in zip(keys, combo)}, c))
        return labelled
    if grid is not None:
        raise ValueError("sweep: a grid needs a single base Config")
    if isinstance(points, (str, bytes, bytearray, Mapping)) or not isinstance(points, Iterable):
        raise TypeError(
            f"sweep: points must be a Config, a list of Configs or of (params, Config), got {type(points).__name__}"
        )
    if max_points is not None and hasattr(points, "__len__") and len(points) > max_points:
        raise _too_many(len(points), max_points, "the list of points")
    for i, p in enumerate(points):
        if isinstance(p, Config):
            labelled.append(({"point": i}, p))
        elif isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], Config):
            labelled.append((dict(p[0]), p[1]))
        else:
            raise TypeError(f"sweep: point {i} must be a Config or (params, Config), got {type(p).__name__}")
    return labelled


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    item = getattr(v, "item", None)  # numpy scalars
    if callable(item) and getattr(v, "shape", None) == ():
        return item()
    if isinstance(v, Policy):
        return {"label": policies.label(v), **v.to_dict()}
    to_dict = getattr(v, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return repr(v)


def grid_json(grid: Mapping[str, Iterable[Any]]) -> str:
    """A grid as JSON (sorted keys): plain values as they are, a Policy as its
    label plus its fields, a config object as its fields (the form stored in
    Parquet metadata, readable without Python)."""
    import json

    return json.dumps({k: [_jsonable(v) for v in vals] for k, vals in grid.items()}, sort_keys=True)
