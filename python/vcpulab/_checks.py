"""Argument checks and guards shared by vcpulab's public API.

* ``check_int`` / ``check_float`` / ``check_bool``: validate one argument
  *before any work* and raise ``TypeError`` (wrong type) or ``ValueError``
  (out of range), naming the argument, so no oversized value ever reaches the
  Rust core (where it would overflow a conversion or size an allocation).
* ``guard_panics``: a decorator (functions) / class decorator (every public
  method and property) turning a Rust panic that crossed the FFI
  (``pyo3_runtime.PanicException``, a ``BaseException``) into a
  ``RuntimeError`` that says it is a bug in vcpulab. Panics are bugs: the
  boundary checks above are the real defence; this keeps a missed one from
  escaping ``except Exception`` (and a notebook's error handling). One panic
  is not a bug: a Ctrl-C that lands in Python code a Rust extension called
  back (polars' dtypes) and that the extension unwrapped; it is raised as the
  ``KeyboardInterrupt`` it was, so no ``except RuntimeError`` swallows it.
* ``ForkSafe``: a mixin for objects that own kernel resources (a KVM fd, a
  mapping, a vCPU thread's lock). They refuse ``copy``/``deepcopy``/``pickle``
  (``TypeError``: a copy would share — and on garbage collection close — the
  original's resources), and after ``os.fork()`` an object created before the
  fork raises ``RuntimeError`` in the child instead of touching locks held by
  threads that do not exist there (``os.register_at_fork``).
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

#: Bumped in every forked child (os.register_at_fork): objects remember the
#: generation they were created in.
_fork_generation = 0


def _after_fork_in_child() -> None:
    global _fork_generation
    _fork_generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

#: Per-object ownership tokens (never reused in a process, unlike ``id()``).
_tokens = itertools.count(1)


def new_token() -> int:
    """A process-unique token (a Program names its VM by it, not by ``id()``)."""
    return next(_tokens)


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def check_int(name: str, v: Any, lo: int | None = None, hi: int | None = None) -> int:
    """``v`` as an int in ``[lo, hi]`` (numpy integers accepted; bools and
    floats refused with TypeError, out of range with ValueError)."""
    if not _is_int(v):
        raise TypeError(f"{name} must be an int, got {type(v).__name__} {v!r}")
    v = int(v)
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}{'' if hi is None else f' (and <= {hi})'}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be <= {hi}, got {v}")
    return v


def check_float(
    name: str,
    v: Any,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    unit: str = "",
) -> float:
    """``v`` as a finite float in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{name} must be a number{f' ({unit})' if unit else ''}, got {type(v).__name__} {v!r}")
    f = float(v)
    u = f" {unit}" if unit else ""
    if not math.isfinite(f):
        raise ValueError(f"{name} must be a finite number{u}, got {f}")
    if lo is not None and (f < lo or (lo_open and f == lo)):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo:g}{u}, got {f:g}")
    if hi is not None and f > hi:
        raise ValueError(f"{name} must be <= {hi:g}{u}, got {f:g}")
    return f


def check_bool(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"{name} must be a bool, got {type(v).__name__} {v!r}")
    return v


def check_type(name: str, v: Any, cls: type | tuple[type, ...]) -> Any:
    if not isinstance(v, cls):
        want = cls.__name__ if isinstance(cls, type) else " or ".join(c.__name__ for c in cls)
        raise TypeError(f"{name} must be a {want}, got {type(v).__name__} {v!r}")
    return v


def check_seq(name: str, v: Any, what: str = "values", *, min_len: int = 0) -> list[Any]:
    """``v`` (a list, tuple, array or other iterable) as a list; a str, bytes, a
    mapping or a non-iterable raises TypeError naming the argument (iterating
    ``"0,1"`` or ``b"x"`` would give characters or byte values), fewer than
    ``min_len`` items ValueError. The items are the caller's to check."""
    if isinstance(v, (str, bytes, bytearray, Mapping)) or not isinstance(v, Iterable):
        raise TypeError(f"{name} must be a sequence of {what}, got {type(v).__name__} {v!r}")
    out = list(v)
    if len(out) < min_len:
        least = "one item" if min_len == 1 else f"{min_len} items"
        raise ValueError(f"{name} must hold at least {least} ({what}), got {out!r}")
    return out


# ------------------------------------------------------------------ renamed args


_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def frames_in_package() -> int:
    """How many frames, from the caller of this function outwards, run
    vcpulab's own code before the user's (for a warning's ``stacklevel``)."""
    f = sys._getframe(1)
    n = 0
    while f is not None and f.f_code.co_filename.startswith(_PKG_DIR):
        f = f.f_back  # type: ignore[assignment]
        n += 1
    return n


def _outside_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside this module (the user's
    call, through any wrappers of this module), for warnings.warn called here."""
    f = sys._getframe(1)
    level = 1
    while f is not None and f.f_code.co_filename == __file__:
        f = f.f_back  # type: ignore[assignment]
        level += 1
    return level


def renamed(**old_to_new: str) -> Callable[[F], F]:
    """Accept the former keyword names of a function's arguments (units
    added to the names: ``duration`` -> ``duration_s``): an old name works
    with a DeprecationWarning naming the new one; the old and the new name
    together raise TypeError."""
    return _renamed(old_to_new, why="the unit is in the name")


#: the date the renames of one spelling for host CPU lists (``cpus=`` ->
#: ``pcpus=``) were made; their DeprecationWarnings name it
PCPUS_RENAMED = "2026-12-01"

#: the date a count of host CPUs named ``pcpus`` became ``n_pcpus``
#: (``sim.Host``, ``plot.sched_map*``), so that ``pcpus`` is always a list of
#: CPU ids; the simulator's side of it is Rust's (``FIELD_ALIASES`` in
#: src/sim/config/schema.rs, read through the schema)
N_PCPUS_RENAMED = "2026-12-05"


def renamed_since(since: str, why: str, name: str | None = None, **old_to_new: str) -> Callable[[F], F]:
    """`renamed` with the date of the rename and its reason in the warning
    (``"Experiment(cpus=...) is deprecated since 2026-12-01; use pcpus= (...)"``);
    ``name``: what the warning calls the function (default its ``__name__``,
    e.g. a class for its ``__init__``)."""
    return _renamed(old_to_new, why=why, since=since, name=name)


def _renamed(
    old_to_new: dict[str, str], why: str, since: str | None = None, name: str | None = None
) -> Callable[[F], F]:
    when = f" since {since}" if since else ""

    def deco(fn: F) -> F:
        called = name or fn.__name__

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            for old, new in old_to_new.items() if kwargs else ():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{called}() got {old}= and {new}=; {old} is the deprecated name of {new}")
                    warnings.warn(
                        f"{called}({old}=...) is deprecated{when}; use {new}= ({why})",
                        DeprecationWarning,
                        stacklevel=_outside_stacklevel(),
                    )
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return inner  # type: ignore[return-value]

    return deco


def former_name(
    fn: str, old: str, new: str, old_value: Any, new_value: Any, new_default: Any, stacklevel: int = 3
) -> Any:
    """`renamed` for a hot-path method that takes the former name as a
    keyword-only argument instead of being wrapped (a wrapper frame packs a
    tuple and a dict per call): warns at the method's caller and returns the
    value to use; the new name away from its default as well raises TypeError.
    ``stacklevel`` 2 when the method is Rust (no Python frame of its own)."""
    if new_value != new_default:
        raise TypeError(f"{fn}() got {old}= and {new}=; {old} is the deprecated name of {new}")
    warnings.warn(
        f"{fn}({old}=...) is deprecated; use {new}= (the unit is in the name)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return old_value


# --------------------------------------------------------------------------- panics

_BUG = "internal error in vcpulab (a bug in vcpulab, not in your input: please report it with this message)"


def _is_panic(e: BaseException) -> bool:
    t = type(e)
    return t.__name__ == "PanicException" and t.__module__ == "pyo3_runtime"


def _is_interrupt_panic(e: BaseException) -> bool:
    """A panic whose cause is a Ctrl-C: Python code that a Rust extension
    called back (polars builds its ``pl.Enum`` dtypes that way when it hands a
    frame to Python) raised ``KeyboardInterrupt`` at a pending SIGINT, and the
    extension unwrapped the error (its message holds the ``PyErr``'s type)."""
    head = str(e).split("traceback", 1)[0]
    return "<class 'KeyboardInterrupt'>" in head or "KeyboardInterrupt()" in head


def _wrap(f: F) -> F:
    @functools.wraps(f)
    def inner(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except BaseException as e:
            if _is_panic(e):
                if _is_interrupt_panic(e):
                    # a Ctrl-C, not a bug: it must stop the caller as Ctrl-C does
                    raise KeyboardInterrupt from e
                raise RuntimeError(f"{_BUG}: {e}") from None
            raise

    inner.__wrapped_by_guard__ = True  # type: ignore[attr-defined]
    return inner  # type: ignore[return-value]


def guard_panics(obj: T) -> T:
    """Decorate a function, or a class (every public method and property,
    plus ``__init__``/``__enter__``/``__exit__``), so a Rust panic surfaces as
    ``RuntimeError`` naming it a bug in vcpulab."""
    if isinstance(obj, type):
        for name, attr in list(vars(obj).items()):
            if name.startswith("_") and name not in ("__init__", "__enter__", "__exit__"):
                continue
            if isinstance(attr, property):
                setattr(
                    obj,
                    name,
                    property(
                        _wrap(attr.fget) if attr.fget else None,
                        _wrap(attr.fset) if attr.fset else None,
                        attr.fdel,
                        attr.__doc__,
                    ),
                )
            elif isinstance(attr, (staticmethod, classmethod)):
                setattr(obj, name, type(attr)(_wrap(attr.__func__)))
            elif callable(attr) and not getattr(attr, "__wrapped_by_guard__", False):
                setattr(obj, name, _wrap(attr))
        return obj
    return _wrap(obj)  # type: ignore[type-var, arg-type]


# --------------------------------------------------------------------------- kernel resources


def forked_error(kind: str) -> RuntimeError:
    """The error of a resource-owning object (a ``kind``) used in a child
    forked after it was created: `ForkSafe` raises it, and so does the
    extension's ``Vcpu.run`` (src/py/kvm.rs ``run_checked``)."""
    return RuntimeError(
        f"this {kind} was created in the parent of a forked process: its KVM file "
        "descriptors and locks belong to the parent (threads running vCPUs there do not exist here); "
        "create a new Host/Vm in the child (or use the 'spawn'/'forkserver' start method)"
    )


class ForkSafe:
    """Mixin for objects owning kernel resources: no copy, no pickle, and a
    clear error when used in a child process forked after they were created.

    Subclasses call ``self._fork_init()`` in ``__init__`` and
    ``self._check_process()`` before touching their resources."""

    _fork_gen: int = 0

    def _fork_init(self) -> None:
        self._fork_gen = _fork_generation

    def _forked(self) -> bool:
        return self._fork_gen != _fork_generation

    def _check_process(self) -> None:
        if self._fork_gen != _fork_generation:
            raise forked_error(type(self).__name__)

    def __copy__(self) -> Any:
        raise TypeError(
            f"a {type(self).__name__} owns kernel resources and cannot be copied (a copy would close the "
            "original's when it is garbage-collected); pass the object itself"
        )

    def __deepcopy__(self, memo: Any) -> Any:
        self.__copy__()

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            f"a {type(self).__name__} owns kernel resources (KVM file descriptors, guest memory) and cannot be "
            "pickled or sent to another process; create it where it is used"
        )

    def __getstate__(self) -> Any:
        self.__reduce_ex__(2)


def checks_inline(f: F) -> F:
    """Mark a hot-path method that does `guard_panics`' and
    `fork_checked`'s work itself (its Rust side turns a panic into
    ``RuntimeError``; it calls ``_check_process`` inline), so the class
    decorators leave it unwrapped: two Python wrapper frames per call are a
    measurable share of a ~10 µs vCPU exit."""
    f.__wrapped_by_guard__ = True  # type: ignore[attr-defined]
    f.__checks_inline__ = True  # type: ignore[attr-defined]
    return f


def fork_checked(cls: type[T]) -> type[T]:
    """Class decorator: every public method and property of a ForkSafe class
    first checks it is used in the process (fork generation) that created it."""
    for name, attr in list(vars(cls).items()):
        if name.startswith("_"):
            continue

        def make(f: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(f)
            def inner(self: Any, *args: Any, **kwargs: Any) -> Any:
                self._check_process()
                return f(self, *args, **kwargs)

            return inner

        if isinstance(attr, property):
            setattr(
                cls,
                name,
                property(
                    make(attr.fget) if attr.fget else None,
                    make(attr.fset) if attr.fset else None,
                    attr.fdel,
                    attr.__doc__,
                ),
            )
        elif callable(attr) and not isinstance(attr, (staticmethod, classmethod, type)):
            if getattr(attr, "__checks_inline__", False):
                continue
            setattr(cls, name, make(attr))
    return cls
