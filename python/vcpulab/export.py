"""Traces out: a real or simulated trace as a file Perfetto opens.

[`to_perfetto`][vcpulab.export.to_perfetto] writes the Chrome trace-event
JSON format ("JSON Array/Object Format", the format of chrome://tracing,
which the Perfetto UI at https://ui.perfetto.dev opens as it is) from
``Run.trace`` (a real run, `vcpulab.experiment.run(trace=True)` or
`Attached.trace`) or ``sim.Result.trace`` (a simulated one):

* each VM is a process ("VM 0", "VM 1", …) and each of its vCPUs a thread
  ("vCPU 3"): one slice per interval the vCPU thread ran, named after the
  host CPU it ran on;
* the host CPUs are the threads of one more process, "host CPUs": one slice
  per interval a task ran there, named after the vCPU ("VM 0 vCPU 3") or,
  for another task of a real trace, its ``comm``;
* a real run's ``exits`` (``exits=True``) are slices on the vCPU's thread
  named by the exit reason, ``halts`` (``halts=True``) slices named
  "halt (polled)" or "halt (blocked)";
* the simulator's ``why`` (what ended a slice) and a real task's ``tid`` are
  each slice's arguments.

Times are µs from the trace's first instant, with ns resolution. The format
is plain JSON: polars builds the lines a column at a time and the standard
library escapes the few strings (no writer package needed), about 2 µs per
event on the project's 2-CPU machine (a 194,000-row simulated trace, two
events a row: 0.8 s, 205 bytes a row). The file is written to a temporary
name and renamed, so nothing half-written is left behind. A window
(``start_ns``, ``end_ns``) keeps large traces small: Perfetto's UI holds a
few million slices comfortably.

    >>> import tempfile, json, pathlib
    >>> from vcpulab import sim
    >>> from vcpulab.export import to_perfetto
    >>> r = sim.run(sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=3),), duration_ns=2_000_000, trace=True))
    >>> out = to_perfetto(r, pathlib.Path(tempfile.mkdtemp()) / "run.json")
    >>> doc = json.loads(out.read_text())
    >>> sorted({e["name"] for e in doc["traceEvents"] if e["ph"] == "M"})
    ['process_name', 'process_sort_index', 'thread_name', 'thread_sort_index']
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import polars as pl

from vcpulab._checks import check_bool, check_int

__all__ = ["HOST_PID", "to_perfetto"]

#: the process id of the "host CPUs" track group (each VM ``v`` is process ``v + 1``)
HOST_PID = 0


def _frame(obj: Any, name: str) -> pl.DataFrame | None:
    if isinstance(obj, pl.DataFrame):
        return obj if name == "trace" else None
    df = getattr(obj, name, None)
    if df is not None and not isinstance(df, pl.DataFrame):
        raise TypeError(f"to_perfetto: {type(obj).__name__}.{name} is not a polars DataFrame")
    return df


def _window(df: pl.DataFrame, lo: int | None, hi: int | None, start: str, end: str) -> pl.DataFrame:
    if lo is not None:
        df = df.filter(pl.col(end) > lo)
    if hi is not None:
        df = df.filter(pl.col(start) < hi)
    return df


def _meta(pid: int, tid: int | None, key: str, value: Any) -> str:
    ev: dict[str, Any] = {
        "ph": "M",
        "pid": pid,
        "name": key,
        "args": {"name" if "name" in key else "sort_index": value},
    }
    if tid is not None:
        ev["tid"] = tid
    return json.dumps(ev)


#: rows turned into JSON at a time (bounds the memory of a large trace's strings)
_CHUNK_ROWS = 500_000


def _json_str(col: str, frame: pl.DataFrame) -> pl.Expr:
    """A string column as JSON string literals (each distinct value escaped
    once by the json module: comms are few, rows many)."""
    vals = [v for v in frame[col].unique().to_list() if v is not None]
    return pl.col(col).replace_strict({v: json.dumps(v) for v in vals}, default=pl.lit('""'), return_dtype=pl.String)


def _num(e: pl.Expr) -> pl.Expr:
    return e.cast(pl.String)


def _slice_lines(
    df: pl.DataFrame, pid: pl.Expr, tid: pl.Expr, ts_ns: pl.Expr, dur_ns: pl.Expr, name: pl.Expr, args: pl.Expr, t0: int
) -> Iterator[str]:
    """Complete ("X") events of ``df``'s rows as JSON lines, built by polars."""
    line = pl.concat_str(
        [
            pl.lit('{"ph":"X","pid":'),
            _num(pid),
            pl.lit(',"tid":'),
            _num(tid),
            pl.lit(',"ts":'),
            _num((ts_ns.cast(pl.Int64) - t0).cast(pl.Float64) / 1000.0),
            pl.lit(',"dur":'),
            _num(dur_ns.cast(pl.Int64).clip(lower_bound=0).cast(pl.Float64) / 1000.0),
            pl.lit(',"name":'),
            name,
            pl.lit(',"args":'),
            args,
            pl.lit("}"),
        ]
    )
    for off in range(0, df.height, _CHUNK_ROWS):
        yield from df.slice(off, _CHUNK_ROWS).select(line.alias("l"))["l"].to_list()


def _events(
    trace: pl.DataFrame,
    exits: pl.DataFrame | None,
    halts: pl.DataFrame | None,
    t0: int,
) -> Iterator[str]:
    cols = trace.columns
    tr = trace.with_columns(pl.col("vm").fill_null(-1), pl.col("vcpu").fill_null(-1))
    arg_parts: list[pl.Expr] = []
    if "why" in cols:
        arg_parts += [pl.lit('"why":'), _json_str("why", tr)]
    if "tid" in cols:
        if arg_parts:
            arg_parts.append(pl.lit(","))
        arg_parts += [pl.lit('"tid":'), pl.col("tid").cast(pl.String).fill_null("null")]
    args = pl.concat_str([pl.lit("{"), *arg_parts, pl.lit("}")]) if arg_parts else pl.lit("{}")
    is_vcpu = pl.col("vm") >= 0
    vcpu_label = pl.concat_str(
        [pl.lit('"VM '), _num(pl.col("vm")), pl.lit(" vCPU "), _num(pl.col("vcpu")), pl.lit('"')]
    )
    other = _json_str("comm", tr).fill_null(pl.lit('"other task"')) if "comm" in cols else pl.lit('"other task"')
    if "comm" in cols:
        other = pl.when(pl.col("comm").is_null() | (pl.col("comm") == "")).then(pl.lit('"other task"')).otherwise(other)
    host_name = pl.when(is_vcpu).then(vcpu_label).otherwise(other)
    start, dur = pl.col("start_ns"), pl.col("end_ns").cast(pl.Int64) - pl.col("start_ns").cast(pl.Int64)
    yield from _slice_lines(tr, pl.lit(HOST_PID), pl.col("pcpu"), start, dur, host_name, args, t0)
    on_vcpu = tr.filter(is_vcpu)
    pcpu_name = pl.concat_str([pl.lit('"pCPU '), _num(pl.col("pcpu")), pl.lit('"')])
    yield from _slice_lines(on_vcpu, pl.col("vm") + 1, pl.col("vcpu"), start, dur, pcpu_name, args, t0)
    vm_vcpu = set(zip(on_vcpu["vm"].to_list(), on_vcpu["vcpu"].to_list()))
    if exits is not None:
        ex = exits.filter(pl.col("vm").is_not_null() & (pl.col("vm") >= 0) & pl.col("vcpu").is_not_null())
        h = pl.col("handling_ns").fill_null(0)
        ex_args = pl.concat_str([pl.lit('{"handling_ns":'), _num(h), pl.lit("}")])
        yield from _slice_lines(
            ex, pl.col("vm") + 1, pl.col("vcpu"), pl.col("exit_ns"), h, _json_str("reason", ex), ex_args, t0
        )
        vm_vcpu |= set(zip(ex["vm"].to_list(), ex["vcpu"].to_list()))
    if halts is not None:
        ha = halts.filter(pl.col("vm").is_not_null() & (pl.col("vm") >= 0) & pl.col("vcpu").is_not_null())
        n = pl.col("ns").fill_null(0)
        name = pl.when(pl.col("polled")).then(pl.lit('"halt (polled)"')).otherwise(pl.lit('"halt (blocked)"'))
        ha_args = pl.concat_str(
            [
                pl.lit('{"ns":'),
                _num(n),
                pl.lit(',"window_ns":'),
                pl.col("window_ns").cast(pl.String).fill_null("null"),
                pl.lit("}"),
            ]
        )
        yield from _slice_lines(ha, pl.col("vm") + 1, pl.col("vcpu"), pl.col("time_ns"), n, name, ha_args, t0)
        vm_vcpu |= set(zip(ha["vm"].to_list(), ha["vcpu"].to_list()))
    # names and order of the tracks
    yield _meta(HOST_PID, None, "process_name", "host CPUs")
    yield _meta(HOST_PID, None, "process_sort_index", -1)
    for c in sorted(set(tr["pcpu"].to_list())):
        yield _meta(HOST_PID, c, "thread_name", f"CPU {c}")
        yield _meta(HOST_PID, c, "thread_sort_index", c)
    for vm in sorted({v for v, _ in vm_vcpu}):
        yield _meta(vm + 1, None, "process_name", f"VM {vm}")
        yield _meta(vm + 1, None, "process_sort_index", vm)
    for vm, vcpu in sorted(vm_vcpu):
        yield _meta(vm + 1, vcpu, "thread_name", f"vCPU {vcpu}")
        yield _meta(vm + 1, vcpu, "thread_sort_index", vcpu)


def _write(path: Path, lines: Iterable[str], other: dict[str, Any]) -> int:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write('{"traceEvents": [\n')
            for line in lines:
                if n:
                    f.write(",\n")
                f.write(line)
                n += 1
            f.write('\n], "displayTimeUnit": "ns", "otherData": ')
            f.write(json.dumps(other))
            f.write("}\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return n


def to_perfetto(
    obj: Any,
    path: str | Path,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    exits: bool = True,
    halts: bool = True,
) -> Path:
    """Writes the trace of ``obj`` to ``path`` as Chrome trace-event JSON,
    which Perfetto (https://ui.perfetto.dev) and chrome://tracing open (see
    the module docstring for the tracks). Returns the path.

    Args:
        obj: a traced real ``Run`` (``run(trace=True)``), the frames of
            ``Attached.trace``, a ``sim.Result`` of a run with
            ``trace=True``, or a trace frame itself.
        path: the output file (``.json``; written whole or not at all).
        start_ns: keep only what ends after this instant of the trace's own
            clock (the real trace's ``CLOCK_MONOTONIC`` ns, or simulated ns).
        end_ns: keep only what starts before this instant.
        exits: add a real run's exits on the vCPU threads (ignored where
            the object has none).
        halts: add a real run's halts on the vCPU threads (ignored where
            the object has none).

    Raises ``ValueError`` when ``obj`` has no trace, or the window is empty or
    inverted; ``TypeError`` for an object with no trace frames.
    """
    check_bool("exits", exits)
    check_bool("halts", halts)
    if start_ns is not None:
        start_ns = check_int("start_ns", start_ns, 0, 2**63 - 1)
    if end_ns is not None:
        end_ns = check_int("end_ns", end_ns, 1, 2**63 - 1)
    if start_ns is not None and end_ns is not None and end_ns <= start_ns:
        raise ValueError(f"to_perfetto: end_ns ({end_ns}) must be after start_ns ({start_ns})")
    if not isinstance(path, (str, Path)):
        raise TypeError(f"to_perfetto: path must be a file path (str or Path), got {type(path).__name__} {path!r}")
    if not str(path) or Path(path).is_dir():
        raise ValueError(f"to_perfetto: path must name a file, got {str(path)!r} (a folder or empty)")
    if not isinstance(obj, pl.DataFrame) and not hasattr(obj, "trace"):
        raise TypeError(f"to_perfetto needs a Run, a sim.Result or a trace frame, got {type(obj).__name__}")
    trace = _frame(obj, "trace")
    if trace is None:
        raise ValueError("to_perfetto: this object has no trace (run it with trace=True)")
    need = {"pcpu", "start_ns", "end_ns", "vm", "vcpu"}
    if not need <= set(trace.columns):
        raise ValueError(f"to_perfetto: a trace frame needs the columns {sorted(need)}, got {trace.columns}")
    ex = _frame(obj, "exits") if exits else None
    ha = _frame(obj, "halts") if halts else None
    t0 = int(trace["start_ns"].min()) if trace.height else 0  # type: ignore[arg-type]
    trace = _window(trace, start_ns, end_ns, "start_ns", "end_ns")
    if ex is not None:
        ex = _window(ex, start_ns, end_ns, "exit_ns", "entry_ns")
    if ha is not None and start_ns is not None:
        ha = ha.filter((pl.col("time_ns") + pl.col("ns")) > start_ns)
    if ha is not None and end_ns is not None:
        ha = ha.filter(pl.col("time_ns") < end_ns)
    if trace.height == 0:
        raise ValueError(
            f"to_perfetto: no slice of the trace overlaps the window start_ns={start_ns}, end_ns={end_ns}"
            if start_ns is not None or end_ns is not None
            else "to_perfetto: the trace is empty"
        )
    p = Path(path)
    if not p.parent.is_dir():
        raise ValueError(f"to_perfetto: the folder {p.parent} does not exist")
    other = {"producer": "vcpulab", "time_zero_ns": t0, "start_ns": start_ns, "end_ns": end_ns}
    _write(p, _events(trace, ex, ha, t0), other)
    return p
