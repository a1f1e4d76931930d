"""How much the validation table hangs on the values nobody published.

Every era and cost profile marks some values as *assumptions*: a value no
source gives (the run-queue lock's cost in ``yield_to``, the wake-up IPI's
latency, the host noise, a hypercall's cost…), chosen and documented in
[`vcpulab.validation.eras`][]. [`sensitivity`][vcpulab.validation.sensitivity.sensitivity] re-runs the cases with
one assumption at a time multiplied by each factor (by default ½ and 2) and
reports, case by case, what the comparison becomes. It answers two questions
a reader of the validation table has:

* **Is a result fragile?** A case right at the chosen values that turns
  wrong when one unpublished value halves or doubles is a result of that
  choice, not of the mechanism.
* **Is a miss a missing value or a missing mechanism?** A case wrong at the
  chosen values that no assumption within the factors puts right is not
  waiting for one of these values near its chosen one: the model or the
  workload preset lacks something (or a value is far off; wider factors
  tell). One that an assumption does put right names the figure whose
  publication would settle it.

This is a measurement, not a fit: the eras keep their values, and nothing
here feeds back into them (the fidelity rule: never fit a parameter to a
published row). A factor that mends one case and breaks others is shown as
both.

The case's simulated window is one more such value (``"run.length"``): the
sources ran for seconds to minutes, the cases for the milliseconds a sweep
can afford, and a comparison that moves with the window is still in its
start-up transient.

Only numbers are scaled. Integers and floats are multiplied (integers
rounded, at least 1); [`HostNoise`][vcpulab.sim.HostNoise] scales its two rates
(the noise level), ``idle_states`` every latency and residency. Booleans and
names (``seeded_ties``, ``start_placement``, ``yield_scope``) are choices
between mechanisms, not magnitudes, and are left alone. A value a case
overrides with a recorded reason is the published set-up, not an
assumption, and is not scaled for that case. A scaled value the simulator
refuses (e.g. a jitter above 1) is reported with its error.

``benches/validation_sensitivity.py`` runs it over every case and writes
docs/validation_sensitivity.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

from vcpulab._checks import check_float, check_seq
from vcpulab._interrupt import keep_partial
from vcpulab.sim import HostNoise
from vcpulab.validation._score import MAX_DURATION_SCALE, _fmt, _key, _seed_list, _select, validate
from vcpulab.validation.cases import Case
from vcpulab.validation.eras import ASSUMPTION, COSTS, FITTED, SECTIONS, CostProfile, Param

__all__ = [
    "DEFAULT_FACTORS",
    "MAX_LENGTH_FACTOR",
    "RUN_LENGTH",
    "assumptions",
    "changes",
    "per_case",
    "sensitivity",
    "to_markdown",
]

#: what [`sensitivity`][vcpulab.validation.sensitivity.sensitivity] multiplies the assumptions by unless told
DEFAULT_FACTORS: tuple[float, ...] = (0.5, 2.0)

#: the case's simulated window (warm-up and measured time) as one more
#: scaled value: no source gives it either (the published runs lasted
#: seconds to minutes), and a comparison still in its start-up transient
#: moves with it
RUN_LENGTH = "run.length"
#: the longest window a run-length row simulates, as a multiple of the case's
#: own: a factor beyond it is a "refused" row (x10^4 would run for hours)
MAX_LENGTH_FACTOR = 16.0
_LENGTH = Param(1.0, "x the case's window", ASSUMPTION, "the case's warmup_ns and measure_ns (or iterations)")

_COST_SECTIONS = ("host", "ple", "pv", "halt_poll_model")


def _scale(value: Any, factor: float) -> Any:
    """``value`` times ``factor``, or None where the value is not a magnitude."""
    if isinstance(value, bool) or isinstance(value, str):
        return None
    if isinstance(value, int):
        return None if value == 0 else max(1, int(round(value * factor)))
    if isinstance(value, float):
        return None if value == 0.0 else value * factor
    if isinstance(value, HostNoise):
        if value.kthread_hz == 0 and value.vmm_io_hz == 0:
            return None
        return dataclasses.replace(value, kthread_hz=value.kthread_hz * factor, vmm_io_hz=value.vmm_io_hz * factor)
    if isinstance(value, tuple) and value and all(isinstance(t, tuple) for t in value):
        return tuple(tuple(max(1, int(round(x * factor))) if x else 0 for x in t) for t in value)
    return None


def assumptions(case: Case | str) -> dict[str, Param]:
    """The assumptions a case's runs may read, as ``{"era.section.field" or
    "cost.section.field": Param}``: the era's and the case's cost profile's
    values of kind *assumption* or *fitted* (a declared calibration's
    choice among unpublished values) that are magnitudes (see the module
    docstring), less the ones the case overrides with a recorded reason."""
    (c,) = _select([case])
    out: dict[str, Param] = {}
    era = c.era_obj()
    for s in SECTIONS:
        for k, p in getattr(era, s).items():
            if p.kind in (ASSUMPTION, FITTED) and f"{s}.{k}" not in c.overrides and _scale(p.value, 2.0) is not None:
                out[f"era.{s}.{k}"] = p
    prof = COSTS[c.costs]
    for s in _COST_SECTIONS:
        for k, p in getattr(prof, s).items():
            if p.kind in (ASSUMPTION, FITTED) and _scale(p.value, 2.0) is not None:
                out[f"cost.{s}.{k}"] = p
    return out


def _scaled_profile(prof: CostProfile, path: str, value: Any, factor: float) -> CostProfile:
    sec, _, name = path.partition(".")
    d = dict(getattr(prof, sec))
    old = d[name]
    d[name] = Param(
        value, old.unit, old.kind, f"{old.source} (x{factor:g} for the sensitivity run)", calibration=old.calibration
    )
    return dataclasses.replace(prof, **{sec: d})  # type: ignore[arg-type]


def _builds(c: Case, prof: CostProfile, seed: int) -> list[str] | str:
    """The keys of every variant at the nominal length, or the simulator's
    refusal as text."""
    try:
        ctx = c.ctx(prof, 1.0, 1.0)  # the era itself checks its values
        return [_key(c.build(ctx, v, seed)) for v in c.variants]  # type: ignore[misc]
    except ValueError as e:
        return f"refused: {e}"


_SCHEMA: dict[str, Any] = {
    "case": pl.String,
    "era": pl.String,
    "metric": pl.String,
    "param": pl.String,
    "factor": pl.Float64,
    "nominal_value": pl.String,
    "value": pl.String,
    "published": pl.Float64,
    "nominal_mean": pl.Float64,
    "nominal_ci_low": pl.Float64,
    "nominal_ci_high": pl.Float64,
    "sim_mean": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "per_seed": pl.List(pl.Float64),
    "beyond_seeds": pl.Boolean,
    "nominal_direction_ok": pl.Boolean,
    "direction_ok": pl.Boolean,
    "nominal_within_2x": pl.Boolean,
    "within_2x": pl.Boolean,
    "status": pl.String,
}


def sensitivity(
    cases: Iterable[Case | str] | None = None,
    params: Sequence[str] | None = None,
    factors: Sequence[float] = DEFAULT_FACTORS,
    seeds: int | Sequence[int] = 3,
    duration_scale: float = 0.5,
    executor: Any = None,
) -> pl.DataFrame:
    """Re-runs the expressible cases with one assumption at a time scaled.

    ``cases``: names or [`Case`][vcpulab.validation.Case] objects (default: every expressible
    case). ``params``: the assumptions to scale, as [`assumptions`][vcpulab.validation.sensitivity.assumptions]
    names them (``"era.host.wakeup_ipi_ns"``, ``"cost.host.rq_lock_ns"``),
    or ``"run.length"`` ([`RUN_LENGTH`][vcpulab.validation.sensitivity.RUN_LENGTH]: the case's warm-up and
    measured time, or its iteration count, times each factor; a comparison
    that moves with it is measured in a start-up transient); default every
    one each case may read, and the run length. ``factors``: the multipliers
    (each > 0 and not 1). ``seeds``, ``duration_scale``, ``executor``: as
    [`validate`][vcpulab.validation.validate], which runs the nominal table and
    each scaled one.

    Returns one row per case, assumption and factor where the scaled value
    changes the case's configuration (a value the case's runs do not read
    gives no row): the published value; the nominal and the scaled
    ``sim_mean`` with its 95 % interval over the seeds (``ci_low``,
    ``ci_high``; the nominal one as ``nominal_ci_low``/``nominal_ci_high``),
    ``direction_ok`` and ``within_2x``; the scaled run's ``per_seed``;
    ``beyond_seeds`` (the two intervals do not overlap; True where either is
    undefined, e.g. with one seed); ``status`` "ran" or the simulator's
    refusal of the scaled value (also a factor that makes the value one the
    model cannot take, and a ``run.length`` factor above
    [`MAX_LENGTH_FACTOR`][vcpulab.validation.sensitivity.MAX_LENGTH_FACTOR]).

    Ctrl-C: ``KeyboardInterrupt`` within a second, its ``partial`` the rows
    of the scaled runs that had finished.
    """
    fs = [
        check_float("sensitivity: factors entry", f, 0.0, lo_open=True)
        for f in check_seq("sensitivity: factors", factors, "multipliers", min_len=1)
    ]
    if any(f == 1.0 for f in fs):
        raise ValueError(f"sensitivity: factors must be finite numbers > 0 and != 1, got {list(factors)!r}")
    _seed_list(seeds)  # seeds and duration_scale checked before any run (validate checks them again)
    check_float("sensitivity: duration_scale", duration_scale, 0.0, MAX_DURATION_SCALE, lo_open=True)
    sel = [c for c in _select(cases) if c.build is not None]
    if not sel:
        raise ValueError("sensitivity: none of the cases is expressible (no builder to re-run)")
    known = {p for c in sel for p in assumptions(c)} | {RUN_LENGTH}
    if params is not None:
        if isinstance(params, str):
            params = [params]
        params = check_seq("sensitivity: params", params, "assumption names (None: every one)", min_len=1)
        for p in params:
            if not isinstance(p, str):
                raise TypeError(f"sensitivity: params must hold assumption names (str), got {type(p).__name__} {p!r}")
        bad = [p for p in params if p not in known]
        if bad:
            raise ValueError(f"sensitivity: {bad} are not assumptions of these cases; they have {sorted(known)}")
    rows: list[dict[str, Any]] = []
    try:
        _sensitivity_rows(rows, sel, params, fs, seeds, duration_scale, executor)
    except KeyboardInterrupt as e:
        rows.sort(key=lambda r: (r["case"], r["param"], r["factor"]))
        keep_partial(
            e,
            pl.DataFrame(rows, schema=_SCHEMA, orient="row"),
            call="validation.sensitivity",
            done=len(rows),
            total=len(rows),
            unit="rows (the scaled runs that had finished)",
        )
        raise
    rows.sort(key=lambda r: (r["case"], r["param"], r["factor"]))
    return pl.DataFrame(rows, schema=_SCHEMA, orient="row") if rows else pl.DataFrame(schema=_SCHEMA)


def _sensitivity_rows(
    rows: list[dict[str, Any]],
    sel: list[Case],
    params: Sequence[str] | None,
    fs: list[float],
    seeds: int | Sequence[int],
    duration_scale: float,
    executor: Any,
) -> None:
    """The rows of [`sensitivity`][vcpulab.validation.sensitivity.sensitivity], appended to ``rows`` as each group of
    scaled runs finishes (so that an interrupt keeps them)."""
    nominal = {
        r["case"]: r for r in validate(sel, seeds=seeds, duration_scale=duration_scale, executor=executor).to_dicts()
    }

    era_runs: list[tuple[Case, Case, str, float, Param, Any]] = []  # (case, scaled case, ...)
    cost_runs: dict[tuple[str, str, float], tuple[CostProfile, list[tuple[Case, Param, Any]]]] = {}
    for c in sel:
        base_prof = COSTS[c.costs]
        nominal_keys = _builds(c, base_prof, 0)
        for path, p in assumptions(c).items():
            if params is not None and path not in params:
                continue
            where, _, field = path.partition(".")
            for f in fs:
                try:
                    v = _scale(p.value, f)
                except (ValueError, OverflowError) as e:
                    # the scaled value is not one the model takes (e.g. a noise rate above its bound)
                    rows.append(_row(c, path, f, p, f"{p.value!r} x {f:g}", nominal[c.name], None, f"refused: {e}"))
                    continue
                if where == "era":
                    run_case, prof = (
                        dataclasses.replace(
                            c,
                            name=f"{c.name}|{path}|{f:g}",
                            overrides={**c.overrides, field: (v, f"sensitivity run: the assumption x{f:g}")},
                        ),
                        base_prof,
                    )
                else:
                    run_case, prof = c, _scaled_profile(base_prof, field, v, f)
                keys = _builds(run_case, prof, 0)
                if keys == nominal_keys:
                    continue  # the case's runs do not read this value
                if isinstance(keys, str):
                    rows.append(_row(c, path, f, p, v, nominal[c.name], None, keys))
                elif where == "era":
                    era_runs.append((c, run_case, path, f, p, v))
                else:
                    cost_runs.setdefault((c.costs, path, f), (prof, []))[1].append((c, p, v))
    if era_runs:
        df = validate([r[1] for r in era_runs], seeds=seeds, duration_scale=duration_scale, executor=executor)
        got = {r["case"]: r for r in df.to_dicts()}
        for c, scaled, path, f, p, v in era_runs:
            rows.append(_row(c, path, f, p, v, nominal[c.name], got[scaled.name], "ran"))
    for (_, path, f), (prof, group) in cost_runs.items():
        df = validate([g[0] for g in group], seeds=seeds, duration_scale=duration_scale, costs=prof, executor=executor)
        got = {r["case"]: r for r in df.to_dicts()}
        for c, p, v in group:
            rows.append(_row(c, path, f, p, v, nominal[c.name], got[c.name], "ran"))
    if params is None or RUN_LENGTH in params:
        by_name = {c.name: c for c in sel}
        for f in fs:
            if f > MAX_LENGTH_FACTOR:
                why = f"refused: run.length x{f:g} simulates more than {MAX_LENGTH_FACTOR:g}x each case's window"
                rows.extend(_row(c, RUN_LENGTH, f, _LENGTH, f"{f:g}", nominal[c.name], None, why) for c in sel)
                continue
            df = validate(sel, seeds=seeds, duration_scale=duration_scale * f, executor=executor)
            for r in df.to_dicts():
                c = by_name[r["case"]]
                rows.append(_row(c, RUN_LENGTH, f, _LENGTH, f, nominal[c.name], r, "ran"))


def _row(
    c: Case, path: str, f: float, p: Param, v: Any, nom: dict[str, Any], got: dict[str, Any] | None, status: str
) -> dict[str, Any]:
    return {
        "case": c.name,
        "era": c.era,
        "metric": c.metric,
        "param": path,
        "factor": f,
        "nominal_value": f"{p.value!r} {p.unit}".strip(),
        "value": (v if isinstance(v, str) else f"{v!r} {p.unit}").strip(),  # a str: a product that is no value
        "published": nom["published"],
        "nominal_mean": nom["sim_mean"],
        "nominal_ci_low": nom["ci_low"],
        "nominal_ci_high": nom["ci_high"],
        "sim_mean": None if got is None else got["sim_mean"],
        "ci_low": None if got is None else got["ci_low"],
        "ci_high": None if got is None else got["ci_high"],
        "per_seed": None if got is None else got["per_seed"],
        "beyond_seeds": None if got is None else _apart(nom, got),
        "nominal_direction_ok": nom["direction_ok"],
        "direction_ok": None if got is None else got["direction_ok"],
        "nominal_within_2x": nom["within_2x"],
        "within_2x": None if got is None else got["within_2x"],
        "status": status,
    }


def _apart(nom: dict[str, Any], got: dict[str, Any]) -> bool:
    """Whether two runs' 95 % intervals over the seeds do not overlap (True
    where either interval is undefined, e.g. one seed: no spread to compare)."""
    a, b, c, d = nom["ci_low"], nom["ci_high"], got["ci_low"], got["ci_high"]
    if any(x is None or not math.isfinite(x) for x in (a, b, c, d)):
        return True
    return bool(d < a or c > b)


def changes(df: pl.DataFrame) -> pl.DataFrame:
    """The rows of a [`sensitivity`][vcpulab.validation.sensitivity.sensitivity] frame where the scaled assumption
    changes whether the case is right in direction or within 2x (see
    ``beyond_seeds`` for whether the change exceeds the seeds' spread)."""
    return df.filter(
        (pl.col("status") == "ran")
        & (
            (pl.col("direction_ok").ne_missing(pl.col("nominal_direction_ok")))
            | (pl.col("within_2x").ne_missing(pl.col("nominal_within_2x")))
        )
    )


def per_case(df: pl.DataFrame) -> pl.DataFrame:
    """One row per case of a [`sensitivity`][vcpulab.validation.sensitivity.sensitivity] frame: its nominal verdicts,
    the number of scaled runs (``scaled``), the assumptions that put a wrong
    direction right (``mends_direction``) or a right one wrong
    (``breaks_direction``), the same for within 2x, and the range of
    ``sim_mean`` over every scaled run.

    A verdict that changes counts as mended or broken only where the scaled
    run's 95 % interval over the seeds does not overlap the nominal one
    (``beyond_seeds``): a comparison whose seeds already straddle the
    published sign flips under any perturbation, and that says nothing about
    the value scaled. Those flips are counted in ``within_seeds``."""
    out = []
    for case, g in df.group_by("case", maintain_order=True):
        ran = g.filter(pl.col("status") == "ran")

        def which(col: str, nominal: bool, now: bool) -> list[str]:
            # called only within this iteration, so `ran` is this case's
            sel = ran.filter((pl.col(f"nominal_{col}") == nominal) & (pl.col(col) == now) & pl.col("beyond_seeds"))  # noqa: B023
            return [f"{p} x{f:g}" for p, f in zip(sel["param"], sel["factor"])]

        flipped = (pl.col("direction_ok").ne_missing(pl.col("nominal_direction_ok"))) | (
            pl.col("within_2x").ne_missing(pl.col("nominal_within_2x"))
        )
        within_seeds = ran.filter(flipped & ~pl.col("beyond_seeds")).height

        means = [m for m in ran["sim_mean"].to_list() if m is not None]
        out.append(
            {
                "case": case[0],
                "metric": g["metric"][0],
                "published": g["published"][0],
                "nominal_mean": g["nominal_mean"][0],
                "nominal_direction_ok": g["nominal_direction_ok"][0],
                "nominal_within_2x": g["nominal_within_2x"][0],
                "scaled": g.height,
                "min_mean": min(means) if means else None,
                "max_mean": max(means) if means else None,
                "mends_direction": which("direction_ok", False, True),
                "breaks_direction": which("direction_ok", True, False),
                "mends_within_2x": which("within_2x", False, True),
                "breaks_within_2x": which("within_2x", True, False),
                "within_seeds": within_seeds,
            }
        )
    return pl.DataFrame(out)


def to_markdown(df: pl.DataFrame) -> str:
    """The per-case summary of a [`sensitivity`][vcpulab.validation.sensitivity.sensitivity] frame as a markdown table."""
    pc = per_case(df)

    def yn(x: Any) -> str:
        return "—" if x is None else ("yes" if x else "**no**")

    def names(xs: list[str]) -> str:
        return ", ".join(f"`{x}`" for x in xs) if xs else "none"

    lines = [
        "| case | published | nominal | scaled runs: min … max | dir | mends dir | breaks dir | 2x | mends 2x | breaks 2x "
        "| flips within the seeds' spread |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in pc.iter_rows(named=True):
        m = r["metric"]
        lines.append(
            f"| {r['case']} | {_fmt(m, r['published'])} | {_fmt(m, r['nominal_mean'])} | {_fmt(m, r['min_mean'])} … "
            f"{_fmt(m, r['max_mean'])} | {yn(r['nominal_direction_ok'])} | {names(r['mends_direction'])} | "
            f"{names(r['breaks_direction'])} | {yn(r['nominal_within_2x'])} | {names(r['mends_within_2x'])} | "
            f"{names(r['breaks_within_2x'])} | {r['within_seeds']} |"
        )
    return "\n".join(lines)
