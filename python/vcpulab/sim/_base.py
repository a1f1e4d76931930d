"""What the simulator's configuration classes stand on: the JSON Schema
generated from Rust (``_core.sim_config_schema()``), the field validators
that take their limits and enumerated names from it (``_int``, ``_float``,
``_bool``, ``_choice``, ``_instance``) and ``_Base`` (``to_dict`` /
``from_dict``).

The bottom floor of the configuration modules: ``_workload`` (phases and
``Workload``), ``_halt_poll_config`` (``HaltPoll``), ``policies`` (``Policy``)
and ``_config`` (the rest, and the public home of them all) import it; it
imports none of them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import re
import sys
import warnings
from collections.abc import Mapping
from typing import Any

from vcpulab._checks import renamed_since
from vcpulab._codegen import RUST_DEFS as RUST_DEFS
from vcpulab._codegen import _schema as _schema

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def schema_of(cls_name: str) -> dict[str, Any]:
    """The schema object (with ``properties``) of a config class or phase class."""
    s = _schema()
    if cls_name in RUST_DEFS:
        d = RUST_DEFS[cls_name]
        return s if d == "" else s["$defs"][d]  # type: ignore[no-any-return]
    kind = re.sub(r"(?<!^)(?=[A-Z])", "_", cls_name).lower()  # TaskQueue -> task_queue
    for v in s["$defs"]["Phase"]["oneOf"]:
        if v["properties"]["kind"].get("const") == kind:
            return v  # type: ignore[no-any-return]
    raise KeyError(f"no schema for {cls_name}")


def field_schema(cls_name: str, name: str) -> dict[str, Any]:
    """A field's schema, with a ``$ref`` to an enum resolved (``enum``: its names)."""
    prop = dict(schema_of(cls_name)["properties"][name])
    ref = prop.get("$ref")
    if ref:
        target = _schema()["$defs"][ref.rsplit("/", 1)[1]]
        if "enum" in target:
            prop["enum"], prop["deprecated_names"] = list(target["enum"]), []
        elif "oneOf" in target and all(v.get("type") == "string" for v in target["oneOf"]):
            prop["enum"] = [n for v in target["oneOf"] for n in (v.get("enum") or [v["const"]])]
            prop["deprecated_names"] = [v["const"] for v in target["oneOf"] if v.get("deprecated")]
    return prop


@functools.cache
def max_items(cls_name: str, name: str) -> int:
    """The most entries a list field may hold (the schema's ``maxItems``)."""
    return int(field_schema(cls_name, name)["maxItems"])


@functools.cache
def renamed_choices(cls_name: str, name: str) -> dict[str, str]:
    """Old name -> new name of an enumerated field's deprecated aliases, as the
    schema lists them (``x-alias-of``; Rust reads them as serde aliases)."""
    ref = schema_of(cls_name)["properties"][name].get("$ref", "")
    target = _schema()["$defs"].get(ref.rsplit("/", 1)[-1], {})
    return {v["const"]: v["x-alias-of"] for v in target.get("oneOf", ()) if v.get("deprecated") and "x-alias-of" in v}


@functools.cache
def renamed_fields(cls_name: str) -> dict[str, tuple[str, str, str]]:
    """Old name -> (new name, date of the rename, why) of a class's renamed
    fields, as the schema lists them (``x-renamed-fields``; Rust reads the
    old key as a serde alias of the new one)."""
    try:
        out = schema_of(cls_name).get("x-renamed-fields", {})
    except KeyError:  # not a configuration class
        return {}
    return {old: (r["to"], r["since"], r["why"]) for old, r in out.items()}


def new_field_name(cls: type, old: str, where: str) -> str:
    """The current name of field ``old`` of ``cls`` if it is a renamed one
    (with a DeprecationWarning naming the new one and the date), else ``old``
    unchanged; ``where``: how the warning names the place (``"Host.from_dict"``)."""
    r = renamed_fields(cls.__name__).get(old)
    if r is None:
        return old
    new, since, why = r
    warnings.warn(
        f"{where}: {cls.__name__}.{old} is deprecated since {since}; use {new} ({why})",
        DeprecationWarning,
        stacklevel=_user_stacklevel(),
    )
    return new


_PACKAGE = __file__.rsplit("/", 2)[0] + "/"  # .../vcpulab/


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside
    vcpulab: the user's line, through ``from_dict``, ``with_path`` or a sweep."""
    f = sys._getframe(2)  # the caller of the function that warns
    level = 2
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE):
        f = f.f_back  # type: ignore[assignment]
        level += 1
    return level


def accept_renamed_fields(cls: type) -> None:
    """Let a config class take each renamed field's old name, as Rust does:
    the old keyword in ``cls(...)`` and the old attribute read warn and name
    the new one; the old and the new keyword together raise TypeError.
    (``from_dict`` and ``Config.with_path`` map old names by
    [`new_field_name`][].)"""
    for old, (new, since, why) in renamed_fields(cls.__name__).items():
        cls.__init__ = renamed_since(since, why, name=cls.__name__, **{old: new})(cls.__init__)  # type: ignore[misc]

        def read_old(self: Any, old: str = old, new: str = new) -> Any:
            return getattr(self, new_field_name(type(self), old, f"{type(self).__name__}.{old}"))

        setattr(cls, old, property(read_old, doc=f"Deprecated since {since}: the old name of ``{new}``."))


_FORMAT_MAX = {"uint8": 2**8 - 1, "uint16": 2**16 - 1, "uint32": U32_MAX, "uint64": U64_MAX}


@functools.cache
def _limits(cls_name: str, name: str) -> tuple[float, float, bool]:
    """(minimum, maximum, maximum excluded) of a numeric field, from the schema."""
    f = field_schema(cls_name, name)
    lo = f.get("minimum", -math.inf)
    hi_open = "exclusiveMaximum" in f
    hi = f["exclusiveMaximum"] if hi_open else f.get("maximum", _FORMAT_MAX.get(f.get("format", ""), math.inf))
    return lo, hi, hi_open


def _int(obj: Any, name: str, hi: int | None = None, optional: bool = False) -> None:
    """An int field within the schema's limits (``hi``: a tighter upper bound
    from another field, e.g. ``sockets <= n_pcpus``)."""
    v = getattr(obj, name)
    cls = type(obj).__name__
    if optional and v is None:
        return
    if isinstance(v, numbers.Integral) and not isinstance(v, (bool, int)):
        v = int(v)  # a numpy integer (a sweep grid's np.arange): a plain int, so JSON and hashes stay the same
        object.__setattr__(obj, name, v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{cls}.{name} must be an int, got {v!r}")
    lo, shi, _ = _limits(cls, name)
    top = shi if hi is None else min(hi, shi)
    if v < lo:
        raise ValueError(f"{cls}.{name} must be >= {int(lo)}, got {v}")
    if v > top:
        raise ValueError(f"{cls}.{name} must be <= {int(top)}, got {v}")


def _float(obj: Any, name: str) -> None:
    v = getattr(obj, name)
    cls = type(obj).__name__
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, int, float)):
        v = int(v) if isinstance(v, numbers.Integral) else float(v)  # numpy scalars as plain numbers
        object.__setattr__(obj, name, v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{cls}.{name} must be a finite number, got {v!r}")
    lo, hi, hi_open = _limits(cls, name)
    if v < lo or v > hi or (hi_open and v >= hi):
        bracket = ")" if hi_open else "]"
        raise ValueError(f"{cls}.{name} must be in [{lo}, {hi}{bracket}, got {v}")


@functools.cache
def choices(cls_name: str, name: str) -> tuple[str, ...]:
    """The names an enumerated field accepts (the schema's, deprecated aliases left out)."""
    f = field_schema(cls_name, name)
    return tuple(n for n in f["enum"] if n not in f["deprecated_names"])


def _bool(obj: Any, name: str) -> None:
    v = getattr(obj, name)
    if not isinstance(v, bool):
        raise ValueError(f"{type(obj).__name__}.{name} must be a bool, got {v!r}")


def _choice(obj: Any, name: str) -> None:
    v = getattr(obj, name)
    valid = choices(type(obj).__name__, name)
    if v not in valid:
        raise ValueError(f"{type(obj).__name__}.{name} must be one of {', '.join(map(repr, valid))}, got {v!r}")


def _instance(obj: Any, name: str, typ: type) -> None:
    v = getattr(obj, name)
    if not isinstance(v, typ):
        raise ValueError(f"{type(obj).__name__}.{name} must be a {typ.__name__}, got {v!r}")


def _struct_class(def_name: str) -> type:
    """The Python class of a schema definition (``HostConfig`` -> ``Host``)."""
    import sys

    py = next(py for py, d in RUST_DEFS.items() if d == def_name)
    return getattr(sys.modules["vcpulab.sim._config"], py)  # type: ignore[no-any-return]


@functools.cache
def _field_checks(cls_name: str) -> tuple[tuple[str, Any], ...]:
    """(field, check) for each field of a class whose own check the schema
    decides: an int or a number within its limits, a bool, one of an enum's
    names, an instance of a configuration class. Lists (``vms``,
    ``phases``, ``idle_states``, ``vcpu_pcpus``) are checked by their
    class's ``__post_init__``, element by element."""
    out: list[tuple[str, Any]] = []
    for name, prop in schema_of(cls_name)["properties"].items():
        if name == "kind" and "const" in prop:
            continue  # a phase's serde tag
        ref, t = prop.get("$ref"), prop.get("type")
        if ref:
            target = _schema()["$defs"][ref.rsplit("/", 1)[1]]
            if "properties" in target:
                d = ref.rsplit("/", 1)[1]
                out.append((name, lambda o, n, d=d: _instance(o, n, _struct_class(d))))
            elif any(v.get("type") == "object" for v in target.get("oneOf", ())):
                continue  # a phase: Workload checks its phases
            else:
                out.append((name, _choice))
        elif t == "integer":
            out.append((name, _int))
        elif isinstance(t, list) and "integer" in t:
            out.append((name, functools.partial(_int, optional=True)))
        elif t == "number":
            out.append((name, _float))
        elif t == "boolean":
            out.append((name, _bool))
        elif t == "string":
            out.append((name, lambda o, n: _instance(o, n, str)))
        elif t == "array" and prop.get("items", {}).get("type") == "integer":
            out.append((name, _int_seq))
    return tuple(out)


def _int_seq(obj: Any, name: str) -> None:
    """A list of ints (``vcpu_pcpus``, ``guest_idle_poll_vcpus``) within the
    schema's item limits and length; kept as a tuple, numpy integers as ints
    (bytes and strings, sequences of ints or characters, are refused)."""
    v = getattr(obj, name)
    cls = type(obj).__name__
    if not isinstance(v, (list, tuple)):
        raise ValueError(f"{cls}.{name} must be a tuple of ints, got {type(v).__name__} {v!r}")
    f = field_schema(cls, name)
    items = f["items"]
    lo, hi = items.get("minimum", -math.inf), items.get("maximum", _FORMAT_MAX.get(items.get("format", ""), math.inf))
    if len(v) > f.get("maxItems", math.inf):
        raise ValueError(f"{cls}.{name} must hold at most {f['maxItems']} entries, got {len(v)}")
    out = []
    for i, x in enumerate(v):
        if isinstance(x, bool) or not isinstance(x, numbers.Integral) or not lo <= x <= hi:
            raise ValueError(f"{cls}.{name}[{i}] must be an int in [{int(lo)}, {int(hi)}], got {x!r}")
        out.append(int(x))
    object.__setattr__(obj, name, tuple(out))


class _Base:
    """to_dict / from_dict for the config dataclasses, and each field's own
    check from the schema (``_check_fields``)."""

    def __post_init__(self) -> None:
        self._check_fields()

    def _check_fields(self) -> None:
        """Check each field against the schema (its type, limits and names),
        in the schema's order; a class with rules across fields calls this in
        its ``__post_init__`` before them."""
        for name, check in _field_checks(type(self).__name__):
            check(self, name)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if not f.metadata.get("serialise", True):
                continue
            v = getattr(self, f.name)
            # fields added after a config format settled are left out at
            # their defaults, so older configs keep their JSON and hash
            if f.metadata.get("omit_default") and v == _field_default(f):
                continue
            out[f.name] = _to_plain(v)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Any:
        if not isinstance(d, Mapping):
            raise ValueError(f"{cls.__name__}.from_dict needs a mapping, got {d!r}")
        renamed = renamed_fields(cls.__name__)
        if any(k in renamed for k in d):
            if any(k in renamed and renamed[k][0] in d for k in d):
                raise ValueError(f"{cls.__name__}.from_dict got a field under its old and its new name: {sorted(d)}")
            d = {new_field_name(cls, k, f"{cls.__name__}.from_dict"): v for k, v in d.items()}
        names = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(d) - set(names)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
        kw = {k: cls._field_from_plain(k, v) for k, v in d.items()}
        try:
            return cls(**kw)
        except TypeError as e:  # a missing required field, named by Python
            raise ValueError(f"{cls.__name__}: {e}") from None

    @classmethod
    def _field_from_plain(cls, name: str, v: Any) -> Any:
        return v


def _plain_seq(owner: str, name: str, v: Any) -> list[Any] | tuple[Any, ...]:
    if not isinstance(v, (list, tuple)):
        raise ValueError(f"{owner}.{name} must be a list, got {type(v).__name__} {v!r}")
    return v


def _field_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


_NEW = {"omit_default": True}


def _to_plain(v: Any) -> Any:
    if isinstance(v, _Base):
        return v.to_dict()
    if isinstance(v, (tuple, list)):
        return [_to_plain(x) for x in v]
    return v
