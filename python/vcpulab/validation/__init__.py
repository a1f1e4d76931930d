"""Validation: the published results vcpulab's simulator exists to explore,
registered, cited and scored in one table.

* [`CASES`][vcpulab.validation.CASES] — the registry: one [`Case`][vcpulab.validation.Case] per published comparison
  (source, published numbers with units, metric, era, configuration builder);
* [`ERAS`][vcpulab.validation.ERAS] / [`Era`][vcpulab.validation.Era] — one parameter set per era of kernel and
  hardware, every value with its unit and source; [`COSTS`][vcpulab.validation.COSTS] — the
  ``hardware`` and ``this_host`` cost profiles;
* [`validate`][vcpulab.validation.validate] — runs the cases as one sweep (rayon locally, or any
  executor such as Dask) and returns a polars frame, one row per case;
  [`summary`][vcpulab.validation.summary] / [`summary_line`][vcpulab.validation.summary_line] — the shares against the targets
  and the flags (lock-step, starvation, instability, bimodality);
* [`check_case`][vcpulab.validation.check_case] — finds era values a case changes without a recorded
  reason (no per-case tuning);
* [`vcpulab.validation.sensitivity`][] — every case re-run with each
  unpublished value (an era's or cost profile's *assumption*) halved and
  doubled: which rows hang on which assumption;
* [`vcpulab.validation.calibration`][] — the declared calibration: a few
  unpublished costs fitted once, jointly, on a named set of cases
  ([`SETS`][vcpulab.validation.eras.SETS]); the other cases are held out and
  their score is the headline;
* ``python -m vcpulab.validation [--quick]`` prints the table.

See docs/validation.md (its table is written by benches/validation_full.py).
"""

from __future__ import annotations

from vcpulab.validation._score import (
    DEAD_BAND,
    bimodal,
    jain,
    quick_kwargs,
    summary,
    summary_line,
    t_interval,
    to_markdown,
    validate,
    within_2x,
)
from vcpulab.validation.cases import CASES, METRICS, Case, Ctx, OnSpinGate, Published, Source, case, check_case
from vcpulab.validation.eras import COSTS, ERAS, PENDING, CostProfile, Era, Param, era, eras_markdown, this_host

__all__ = [
    "CASES",
    "COSTS",
    "DEAD_BAND",
    "ERAS",
    "METRICS",
    "PENDING",
    "Case",
    "CostProfile",
    "Ctx",
    "Era",
    "OnSpinGate",
    "Param",
    "Published",
    "Source",
    "bimodal",
    "case",
    "check_case",
    "era",
    "eras_markdown",
    "jain",
    "quick_kwargs",
    "summary",
    "summary_line",
    "t_interval",
    "this_host",
    "to_markdown",
    "validate",
    "within_2x",
]
