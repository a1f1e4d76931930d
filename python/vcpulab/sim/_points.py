"""The points of a sweep: one expansion shared by the local sweep
(:func:`vcpulab.sim.sweep`) and the checkpointed / distributed one
(:mod:`vcpulab.sim.distributed`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vcpulab.sim import policies, presets
from vcpulab.sim._config import Config, Policy

__all__ = ["Point", "expand", "grid_json", "param_value", "resolve_named"]

Point = tuple[dict[str, Any], Config]


def param_value(v: Any) -> Any:
    """A grid value as a parameter column: a Policy as its label (its
    constructor's name, :func:`vcpulab.sim.policies.label`), a named object as
    its name, plain values as they are."""
    if isinstance(v, Policy):
        return policies.label(v)
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if hasattr(v, "name") and isinstance(getattr(v, "name"), str):
        return v.name
    return repr(v)


def resolve_named(path: str, value: Any) -> Any:
    """A grid value given by name: at a ``…policy`` path a policy name of
    :data:`vcpulab.sim.policies.NAMES`, at a ``…workload`` path a preset of
    :data:`vcpulab.sim.presets.NAMES`; anything else unchanged."""
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


def expand(
    points: Config | Sequence[Config] | Sequence[tuple[Mapping[str, Any], Config]],
    grid: Mapping[str, Iterable[Any]] | None = None,
) -> list[Point]:
    """The (params, Config) points of a sweep, in order, with their parameter
    columns: a grid's cartesian product over dotted paths (policy and
    workload names accepted, see :func:`resolve_named`), a list of Configs
    numbered by ``point``, or your own (params, Config) pairs."""
    labelled: list[Point] = []
    if isinstance(points, Config):
        base = points
        if grid is None:
            return [({"point": 0}, base)]
        keys = list(grid)
        values = [[resolve_named(k, v) for v in grid[k]] for k in keys]
        for combo in itertools.product(*values):
            c = base
            for k, v in zip(keys, combo):
                c = c.with_path(k, v)
            labelled.append(({k: param_value(v) for k, v in zip(keys, combo)}, c))
        return labelled
    if grid is not None:
        raise ValueError("sweep: a grid needs a single base Config")
    for i, p in enumerate(points):
        if isinstance(p, Config):
            labelled.append(({"point": i}, p))
        elif isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], Config):
            labelled.append((dict(p[0]), p[1]))
        else:
            raise ValueError(f"sweep: point {i} must be a Config or (params, Config), got {type(p).__name__}")
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
