"""The declared calibration: a few unpublished values fitted once, jointly,
on a named subset of the cases, the other cases held out.

Some values the simulator needs have no published figure (the run-queue
locks of ``yield_to``, a candidate examined by ``kvm_vcpu_on_spin``, the
switch to a vCPU thread with KVM's ``vcpu_put`` / ``vcpu_load``). They start
as documented *assumptions*. The fidelity rule allows one thing more: an
era's or cost profile's few such values may be **fitted once, jointly, on a
named calibration subset** of the registered cases; every other case is
held out, and the held-out score is the headline. A fitted value is a
[`Param`][vcpulab.validation.Param] of kind [`FITTED`][vcpulab.validation.eras.FITTED] whose
``calibration`` names its set; no value is fitted to one case, and no case
gets its own value.

* [`SETS`][vcpulab.validation.eras.SETS] (in `eras`, beside the values they fit): the calibration sets, each
  with its cases, the values it fits, their grids, and the rule that chose
  the cases (written before any fit was run);
* [`fit`][vcpulab.validation.calibration.fit]: every combination of the
  grid scored on the set's cases only, ranked (more right directions, then
  more within 2x, then the smaller mean |log(sim / published)|);
* [`fitted_profile`][vcpulab.validation.calibration.fitted_profile]: a cost
  profile with the chosen values as fitted ``Param`` s naming the set;
* [`adoption`][vcpulab.validation.calibration.adoption]: the adoption
  rule run: every robustness probe under the profile's or era's values of
  today and under the candidates, and whether any probe clean today flags
  its artifact with them;
* a set may fit an era's values instead of a cost profile's (its
  ``profile`` names the era, e.g. ``"2021-5.14"`` for the ``programs``
  constant of the PARSEC rows): the fit then runs each candidate as a
  recorded override of the set's cases
  ([`candidate_cases`][vcpulab.validation.calibration.candidate_cases]), and
  the adopted value is written into the era as a fitted ``Param``;
* [`validate`][vcpulab.validation.validate]'s ``calibration`` column names the
  set a case was fitted on (null: held out), and
  [`summary`][vcpulab.validation.summary] scores the held-out cases apart.

``benches/calibrate_costs.py`` runs the fit and prints its table; the
values it chose are the ``hardware`` profile's or the era's
(``vcpulab.validation.eras``), each saying which fit and grid it came from.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from vcpulab._checks import check_bool, check_float, check_int
from vcpulab._progress import Bar
from vcpulab.validation._score import _select, validate
from vcpulab.validation.cases import Case
from vcpulab.validation.eras import (
    COSTS,
    ERAS,
    PLE2012_1X,
    SETS,
    CalibrationSet,
    CostProfile,
    Era,
    Param,
    fitted_param,
)

__all__ = ["LOG_ERROR_TIE", "adoption", "candidate_cases", "candidate_profile", "fit", "fitted_profile"]


def _set(name: str | CalibrationSet) -> CalibrationSet:
    if isinstance(name, CalibrationSet):
        cs = name
    elif name not in SETS:
        raise ValueError(f"no calibration set {name!r}; the sets are {list(SETS)}")
    else:
        cs = SETS[name]
    if cs.profile not in COSTS and cs.profile not in ERAS:
        raise ValueError(
            f"calibration set {cs.name!r} fits {cs.profile!r}, which is neither a cost profile {list(COSTS)} "
            f"nor an era {list(ERAS)}"
        )
    return cs


def _fits_era(cs: CalibrationSet) -> bool:
    return cs.profile in ERAS


def _with_values(prof: CostProfile, values: Mapping[str, Any], make: Any) -> CostProfile:
    by_sec: dict[str, dict[str, Param]] = {}
    for path, v in values.items():
        sec, _, field = path.partition(".")
        d = by_sec.setdefault(sec, dict(getattr(prof, sec)))
        if field not in d:
            raise ValueError(f"the {prof.name!r} profile has no value {path!r}")
        d[field] = make(path, d[field], v)
    return dataclasses.replace(prof, **by_sec)  # type: ignore[arg-type]


def candidate_profile(cset: str | CalibrationSet, values: Mapping[str, Any]) -> CostProfile:
    """The set's profile with ``values`` (``"section.field"`` → value) in
    place of its own, kinds and sources unchanged but for a note (a
    candidate of the fit, not yet fitted)."""
    cs = _set(cset)
    if _fits_era(cs):
        raise ValueError(f"the {cs.name} set fits era {cs.profile}'s values, not a cost profile's: see candidate_cases")
    base = COSTS[cs.profile]
    return _with_values(
        base,
        values,
        lambda path, old, v: Param(
            v, old.unit, old.kind, f"{old.source} (a candidate of the {cs.name} fit)", calibration=old.calibration
        ),
    )


def fitted_profile(cset: str | CalibrationSet, values: Mapping[str, Any], fit_note: str) -> CostProfile:
    """The set's profile with ``values`` as [`FITTED`][vcpulab.validation.eras.FITTED]
    params naming the set; ``fit_note`` says when and how they were chosen
    (it becomes part of each source)."""
    cs = _set(cset)
    if _fits_era(cs):
        raise ValueError(
            f"the {cs.name} set fits era {cs.profile}'s values: an adopted value is written into the era "
            "(vcpulab.validation.eras), not into a cost profile"
        )
    missing = set(cs.grid) - set(values)
    if missing:
        raise ValueError(f"fitted_profile: the {cs.name} set fits {sorted(cs.grid)}; missing {sorted(missing)}")
    base = COSTS[cs.profile]
    return _with_values(
        base,
        values,
        lambda path, old, v: fitted_param(cs, path, v, old.unit, fit_note, f"the assumption: {old.source}"),
    )


def _era_of(cs: CalibrationSet, values: Mapping[str, Any]) -> Era:
    """The era a set of era values fits, once every path of ``values`` is one of its values."""
    era = ERAS[cs.profile]
    for path in values:
        sec, _, field = path.partition(".")
        if field not in getattr(era, sec, {}):
            raise ValueError(f"era {era.name} has no value {path!r}")
    return era


def candidate_cases(cset: str | CalibrationSet, values: Mapping[str, Any]) -> list[Case]:
    """The set's cases with ``values`` (``"section.field"`` of the set's
    era → value) in place of the era's, each as a recorded override naming
    the fit (a candidate, not a fitted value). For a set that fits an era's
    values; ValueError for a cost profile's (see ``candidate_profile``)."""
    cs = _set(cset)
    if not _fits_era(cs):
        raise ValueError(f"the {cs.name} set fits the {cs.profile!r} cost profile: see candidate_profile")
    era = _era_of(cs, values)
    out = []
    for c in _select(cs.cases):
        if c.era != era.name:
            raise ValueError(f"the {cs.name} set fits era {era.name}, but its case {c.name} is of era {c.era}")
        note = f"a candidate of the {cs.name} fit"
        out.append(dataclasses.replace(c, overrides={**c.overrides, **{p: (v, note) for p, v in values.items()}}))
    return out


def _objective(df: pl.DataFrame) -> tuple[int, int, float]:
    """(directions right, within 2x, mean |log(sim / published)|) of a validate() frame."""
    sim = df.filter(pl.col("status") == "simulated")
    right = int(sim["direction_ok"].fill_null(False).sum())
    w2 = int(sim["within_2x"].fill_null(False).sum())
    ratios = [r for r in sim["sim_over_pub"].to_list() if r is not None and r > 0 and math.isfinite(r)]
    err = sum(abs(math.log(r)) for r in ratios) / len(ratios) if ratios else math.nan
    return right, w2, err


def fit(
    cset: str | CalibrationSet = PLE2012_1X.name,
    seeds: int | None = None,
    duration_scale: float | None = None,
    grid: Mapping[str, Sequence[Any]] | None = None,
    progress: bool | None = None,
) -> pl.DataFrame:
    """Scores every combination of the set's grid on the set's cases only.

    Returns one row per combination, best first: a column per fitted value,
    ``direction_right`` and ``within_2x`` (counts over the set's cases),
    ``log_error`` (mean |log(sim / published)| over the cases with a
    published magnitude), ``departure`` (sum over the fitted values of
    |log(candidate / the value the profile or era holds now)|), ``cases``
    and ``rank`` (1 = chosen: more right directions, then more within 2x,
    then the smaller log error rounded to ``LOG_ERROR_TIE`` (errors equal
    at that resolution are ties), then the smaller departure: of candidates the set's cases
    cannot tell apart, the one nearest the documented value). A tie arises
    where a set's rows bracket the simulated value: two published values
    either side of it give the same mean log error wherever it lies
    between them.
    ``seeds`` / ``duration_scale`` default to the set's ``settings``;
    ``grid`` (a subset of the set's values per field) is for tests;
    ``progress``: a bar over the combinations (default on in a terminal or
    Jupyter)."""
    cs = _set(cset)
    if progress is not None:
        check_bool("progress", progress)
    seeds = check_int("fit: seeds", cs.settings["seeds"] if seeds is None else seeds, 1, 100)
    scale = check_float(
        "fit: duration_scale",
        cs.settings["duration_scale"] if duration_scale is None else duration_scale,
        0.0,
        10.0,
        lo_open=True,
    )
    g = dict(cs.grid)
    if grid is not None:
        for path, vals in grid.items():
            if path not in cs.grid:
                raise ValueError(f"fit: {path!r} is not among the {cs.name} set's values {sorted(cs.grid)}")
            if not vals or any(v not in cs.grid[path] for v in vals):
                raise ValueError(f"fit: {path} values must be some of {list(cs.grid[path])}, got {list(vals)}")
            g[path] = tuple(vals)
    paths = sorted(g)
    rows = []
    combos = list(itertools.product(*(g[p] for p in paths)))
    with Bar(len(combos), f"vcpulab.validation.calibration.fit({cs.name})", progress) as bar:
        for combo in combos:
            values = dict(zip(paths, combo))
            if _fits_era(cs):
                df = validate(candidate_cases(cs, values), seeds=seeds, duration_scale=scale, progress=False)
            else:
                prof = candidate_profile(cs, values)
                df = validate(cs.cases, seeds=seeds, duration_scale=scale, costs=prof, progress=False)
            right, w2, err = _objective(df)
            rows.append(
                {
                    **values,
                    "direction_right": right,
                    "within_2x": w2,
                    "log_error": err,
                    "departure": _departure(cs, values),
                    "cases": df.height,
                }
            )
            bar.update()
    return _ranked(pl.DataFrame(rows), paths)


def _ranked(df: pl.DataFrame, paths: Sequence[str]) -> pl.DataFrame:
    """``fit``'s rows ranked: more right directions, more within 2x, the
    smaller log error rounded to ``LOG_ERROR_TIE`` (equal there: a tie),
    the smaller departure; a ``rank`` column from 1."""
    out = df.with_columns((pl.col("log_error") / LOG_ERROR_TIE).round(0).alias("_err_bin"))
    out = out.sort(
        ["direction_right", "within_2x", "_err_bin", "departure"],
        descending=[True, True, False, False],
        nulls_last=True,
    ).with_row_index("rank", offset=1)
    return out.select([*paths, "direction_right", "within_2x", "log_error", "departure", "cases", "rank"])


#: the resolution of mean |log(sim / published)| in [`fit`][vcpulab.validation.calibration.fit]'s ranking:
#: errors equal when rounded to it are ties (0.1 %: not a difference the set's rows make)
LOG_ERROR_TIE = 1e-3


def _departure(cs: CalibrationSet, values: Mapping[str, Any]) -> float:
    """Sum of |log(candidate / current value)| over the numeric fitted values
    (the current value: the profile's or era's, an assumption before the
    set is adopted, its fitted value after)."""
    target = ERAS[cs.profile] if _fits_era(cs) else COSTS[cs.profile]
    now = target.params()
    total = 0.0
    for path, v in values.items():
        cur = now[path].value if path in now else None
        if isinstance(v, (int, float)) and isinstance(cur, (int, float)) and v > 0 and cur > 0:
            total += abs(math.log(v / cur))
    return total


def adoption(
    cset: str | CalibrationSet, values: Mapping[str, Any], seeds: int = 2, duration_scale: float = 1.0
) -> pl.DataFrame:
    """The adoption rule of a declared calibration, run: every robustness
    probe ([`robustness`][vcpulab.validation.probes.robustness]) under the
    set's profile or era as it is today and with ``values`` (the fit's rank 1,
    ``"section.field"`` → value) in place. One row per probe: ``probe``,
    ``era``, ``value_now`` / ``artifact_now``, ``value_with`` /
    ``artifact_with``, and ``breaks`` (clean today, its artifact present
    with the values). A fit is adopted only when no row ``breaks``: the
    probes are checks of the model, not published data, so the rule looks at
    no held-out case. ``seeds`` and ``duration_scale``: as ``robustness``."""
    from vcpulab.validation.probes import robustness

    cs = _set(cset)
    unknown = set(values) - set(cs.grid)
    if unknown:
        raise ValueError(f"adoption: the {cs.name} set fits {sorted(cs.grid)}; {sorted(unknown)} are not among them")
    # the candidates first: a bad value fails before the probes run
    if _fits_era(cs):
        candidate: dict[str, Any] = {"era_values": {_era_of(cs, values).name: dict(values)}}
    else:
        candidate = {"costs": candidate_profile(cs, values)}
    now = robustness(seeds=seeds, duration_scale=duration_scale)
    withv = robustness(seeds=seeds, duration_scale=duration_scale, **candidate)
    out = now.select("probe", "era", pl.col("value").alias("value_now"), pl.col("artifact").alias("artifact_now")).join(
        withv.select("probe", "era", pl.col("value").alias("value_with"), pl.col("artifact").alias("artifact_with")),
        on=["probe", "era"],
        how="full",
        coalesce=True,
    )
    return out.with_columns(
        (~pl.col("artifact_now").fill_null(False) & pl.col("artifact_with").fill_null(False)).alias("breaks")
    )
