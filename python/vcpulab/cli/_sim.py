"""``vcpulab sim SPEC.toml``: a simulated run or sweep, its frames as Parquet and its sched maps, written all or nothing."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from vcpulab.cli._common import _Failed, _say
from vcpulab.cli._spec import load_spec

#: The file in --out that lists what the last ``vcpulab sim`` wrote there.
_MANIFEST = ".vcpulab-outputs.json"


class _Outputs:
    """``vcpulab sim``'s outputs, staged: written into a hidden folder inside
    ``--out`` and moved into place (``os.replace``, one file at a time) only
    once the run has succeeded. A failing rerun leaves the earlier outputs as
    they were. An earlier run's outputs that this run does not write again (a
    trace, sched maps) are removed then, and only those the manifest
    (``.vcpulab-outputs.json``) says vcpulab wrote: another tool's file in
    ``--out`` is never deleted. (The points/ checkpoint of a sweep is written
    in place on purpose: a rerun resumes from it.)"""

    def __init__(self, out: Path) -> None:
        import tempfile

        self.out = out
        self.stage = Path(tempfile.mkdtemp(prefix=".vcpulab-staging-", dir=out))

    def path(self, name: str) -> Path:
        return self.stage / name

    def commit(self) -> list[Path]:
        """Move the staged files into ``out``; returns their final paths."""
        new = sorted(p.name for p in self.stage.iterdir())
        man = self.out / _MANIFEST
        try:
            old = set(json.loads(man.read_text()).get("files", []))
        except (OSError, ValueError, AttributeError):
            old = set()
        for name in new:
            os.replace(self.stage / name, self.out / name)
        for name in sorted(old - set(new)):
            if "/" not in name and name != _MANIFEST:
                (self.out / name).unlink(missing_ok=True)
        tmp = self.stage / _MANIFEST
        tmp.write_text(json.dumps({"files": new}))
        os.replace(tmp, man)
        self.stage.rmdir()
        return [self.out / n for n in new]

    def abort(self) -> None:
        import shutil

        shutil.rmtree(self.stage, ignore_errors=True)


def _parquet_meta(extra: dict[str, str] | None = None) -> dict[str, str]:
    from vcpulab.provenance import provenance

    prov = provenance()
    meta = {f"vcpulab.{k}": (json.dumps(v, default=str) if not isinstance(v, str) else v) for k, v in prov.items()}
    meta.update(extra or {})
    return meta


def _closed(fig: Any, path: Path) -> Path:
    """A figure already saved to ``path``, closed: pyplot keeps every open
    figure alive, and the CLI writes many."""
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def cmd_sim(args: argparse.Namespace) -> int:
    try:
        base, grid, output = load_spec(Path(args.spec))
    except ValueError as e:  # the SPEC is the command's argument: a bad one is a usage error (status 2)
        raise _Failed(e, 2) from None
    if args.dask and grid is None:
        raise _Failed(ValueError("--dask runs a sweep: the SPEC needs a [grid] (a single run is local)"), 2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    say = _say(args)
    staged = _Outputs(out)
    try:
        doc = _sim_into(staged, base, grid, output, args, say)
    except BaseException:
        staged.abort()
        raise
    files = staged.commit()
    say("wrote:")
    for p in files:
        say(f"  {p}")
    if args.json:
        doc.update(out=str(out), files=[str(p) for p in files])
        print(json.dumps(doc, indent=2, default=str))
    return 0


#: a sweep draws the sched maps of its first points, at most this many
_SWEEP_MAPS = 8


def _map_window(cfg: Any, output: dict[str, object], upp: float, what: str) -> tuple[int, int]:
    """The sched map's window of a run (``[output] start_ns`` / ``end_ns``,
    default the whole run), refused before anything runs where it leaves
    the run or is wider than `vcpulab.plot.MAX_MAP_COLUMNS` columns (a
    failure after a long run loses it)."""

    from vcpulab.plot import MAX_MAP_COLUMNS

    start = int(output.get("start_ns", 0))  # type: ignore[call-overload]  # ints (load_spec checks them)
    end = int(output.get("end_ns", cfg.duration_ns))  # type: ignore[call-overload]
    if end > cfg.duration_ns or start >= end:
        raise ValueError(
            f"[output] start_ns = {start} / end_ns = {end} lie outside {what}, which simulates 0 to "
            f"duration_ns = {cfg.duration_ns}"
        )
    cols = math.ceil((end - start) / (upp * 1000.0))
    if cols > MAX_MAP_COLUMNS:
        need = (end - start) / MAX_MAP_COLUMNS / 1000  # µs a pixel, rounded up to 3 digits
        step = 10 ** (math.floor(math.log10(need)) - 2)
        raise ValueError(
            f"the sched map of {what} ({(end - start) / 1e9:g} s at us_per_pixel = {upp:g}) would be {cols} columns, "
            f"more than {MAX_MAP_COLUMNS}: set [output] us_per_pixel >= {math.ceil(need / step) * step:g}"
            ", a narrower start_ns / end_ns, or sched_map = false"
        )
    return start, end


def _sim_into(
    staged: _Outputs, base: Any, grid: Any, output: dict[str, object], args: argparse.Namespace, say: Any
) -> dict[str, Any]:
    """Runs the SPEC into ``staged``; returns what ``--json`` prints (less the files)."""
    import polars as pl

    from vcpulab import sim
    from vcpulab.plot import sched_map

    out = staged.out
    want_map = bool(output.get("sched_map", base.trace))
    upp = float(output.get("us_per_pixel", 10))  # type: ignore[arg-type]  # a number (load_spec checks it)
    doc: dict[str, Any] = {
        "spec": str(args.spec),
        "kind": "run" if grid is None else "sweep",
        "config_hash": base.config_hash(),
        "seed": base.seed,
    }
    if grid is None:
        if want_map and not base.trace:
            raise ValueError("[output] sched_map needs config.trace = true")
        start_ns, end_ns = _map_window(base, output, upp, "the run") if want_map else (0, None)
        r = sim.run(base)
        meta = _parquet_meta({"vcpulab.config": base.to_json(), "vcpulab.seed": str(base.seed)})
        for name in ("summary", "vms", "vcpus", "pcpus", "trace"):
            df = getattr(r, name)
            if df is not None:
                p = staged.path(f"{name}.parquet")
                df.write_parquet(p, metadata=meta)
        show: list[str] = [
            c
            for c in ("throughput_ops_s", "useful_frac", "spin_frac", "ple_frac", "idle_frac", "ple_exits", "yield_ok")
            if c in r.summary.columns
        ]
        with pl.Config(tbl_cols=len(show)):
            say(r.summary.select(show))
        doc["summary"] = r.summary.row(0, named=True)
        if want_map:
            _closed(
                sched_map(r, staged.path("sched_map.png"), us_per_pixel=upp, start_ns=start_ns, end_ns=end_ns),
                staged.path("sched_map.png"),
            )
        if args.perfetto:
            if r.trace is None:
                raise ValueError("--perfetto needs config.trace = true in the SPEC")
            from vcpulab.export import to_perfetto

            to_perfetto(r, staged.path("trace.perfetto.json"))
    else:
        if args.perfetto:
            raise ValueError("--perfetto writes the trace of a single run; this SPEC has a [grid] (a sweep)")
        from vcpulab.sim._points import grid_json
        from vcpulab.sim.distributed import dask_executor, run_sweep

        if args.dask:
            try:
                import distributed  # noqa: F401
            except ImportError:
                raise ValueError("--dask needs dask.distributed: pip install 'vcpulab[dask]'") from None
        if want_map and base.trace:
            for i, (_, cfg) in enumerate(_grid_points(base, grid)):
                if i >= _SWEEP_MAPS:
                    break
                _map_window(cfg, output, upp, f"point {i}")
        # every point is checkpointed under OUT/points: a rerun resumes where it stopped
        with dask_executor(args.dask) if args.dask else contextlib.nullcontext() as ex:
            df = run_sweep(
                base,
                grid,
                executor=ex,
                out=out / "points",
                threads=args.threads,
                progress=not args.quiet,
                max_points=args.max_points or sim.MAX_SWEEP_POINTS,
            )
        failed = df.filter(pl.col("error").is_not_null())
        if failed.height:
            print(
                f"vcpulab: {failed.height} of {df.height} points failed (see the error column); "
                "rerun the same command to retry them",
                file=sys.stderr,
            )
        p = staged.path("sweep.parquet")
        df.write_parquet(
            p, metadata=_parquet_meta({"vcpulab.base_config": base.to_json(), "vcpulab.grid": grid_json(grid)})
        )
        show = [
            c
            for c in list(grid) + ["throughput_ops_s", "useful_frac", "spin_frac", "ple_frac", "ple_exits", "yield_ok"]
            if c in df.columns
        ]
        with pl.Config(tbl_rows=40, tbl_cols=len(show), fmt_str_lengths=40):
            say(df.select(show))
        doc["grid"] = json.loads(grid_json(grid))
        doc["points"] = df.height
        doc["failed_points"] = failed.height
        keep = [*show, *(c for c in ("error", "config_hash") if c in df.columns and c not in show)]
        doc["rows"] = df.select(keep).to_dicts()
        if want_map and base.trace:
            for i, (params, cfg) in enumerate(_grid_points(base, grid)):
                if i >= _SWEEP_MAPS:
                    break
                r = sim.run(cfg)
                name, title = _point_names(i, params)
                m = staged.path(name)
                start_ns, end_ns = _map_window(cfg, output, upp, f"point {i}")
                _closed(sched_map(r, m, us_per_pixel=upp, start_ns=start_ns, end_ns=end_ns, title=title), m)
    return doc


def _point_names(i: int, params: dict[str, object]) -> tuple[str, str]:
    """The sched map file name and title of sweep point ``i`` with grid values
    ``params``: ``sched_map_1_policy-dy_eligible.png`` and "vms.0.policy =
    dy_eligible" (each key's last part in the name, the whole key in the
    title; the index keeps names unique and in the sweep's order)."""
    import re

    slug = "_".join(f"{k.rsplit('.', 1)[-1]}-{v}" for k, v in params.items())
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", slug).strip("-")[:80]
    title = ", ".join(f"{k} = {v}" for k, v in params.items())
    return f"sched_map_{i}_{slug}.png" if slug else f"sched_map_{i}.png", f"point {i}: {title}"


def _grid_points(base: object, grid: dict[str, list[object]]):  # type: ignore[no-untyped-def]
    import itertools

    from vcpulab.sim._points import param_value

    keys = list(grid)
    for combo in itertools.product(*(grid[k] for k in keys)):
        cfg = base
        for k, v in zip(keys, combo):
            cfg = cfg.with_path(k, v)  # type: ignore[attr-defined]
        yield dict(zip(keys, (param_value(v) for v in combo))), cfg
