"""Sweeps on any `concurrent.futures.Executor` — a Dask cluster's
included — checkpointed point by point to a Parquet dataset, resumable.

[`vcpulab.sim.sweep`][] delegates here when it is given ``executor=`` or
``out=``; the CLI (``vcpulab sim SPEC.toml --dask ADDR --out DIR``) calls
[`run_sweep`][vcpulab.sim.distributed.run_sweep] directly.

How a sweep runs
----------------
* The grid is expanded exactly as the local sweep does it. Each point gets a
  **point hash**: SHA-256 of its [`Config.config_hash`][vcpulab.sim.Config.config_hash] (itself SHA-256
  of the canonical JSON, stable across processes and machines) and its
  parameters (canonical JSON). Two points are the same work iff their point
  hashes are equal.
* Points are shipped as picklable data — ``(point_hash, config JSON, Python
  policies)`` — in batches (``batch_size`` points per task), keeping
  ``2 × worker threads`` tasks in flight. The task
  (`_run_batch`) calls the Rust simulator in the worker; each point
  that raises is returned as an error row, not an exception.
* Results come back to the **client**, which writes them (workers need no
  shared file system; one writer makes "each point exactly once" a local
  property). A task that dies (``KilledWorker``, ``CancelledError``, a lost
  connection, …) is resubmitted, split into single points, up to
  ``retries`` times; after that its points are recorded as failed.
  A `concurrent.futures.ProcessPoolExecutor` whose worker dies
  (killed, out of memory) is *broken*: it runs nothing more
  (``BrokenProcessPool``), so nothing can be resubmitted to it; every point
  not finished by then is recorded as failed with that error, and the sweep
  returns. Run it again with a new executor (with ``out=``, the finished
  points are kept and the failed ones are computed again).
* ``Ctrl-C`` cancels the outstanding tasks, stops the points running in
  this process's threads within ~50 ms, and re-raises
  ``KeyboardInterrupt``; results already received are on disk.

The dataset (``out=DIR``)
-------------------------
One Parquet file per point, ``DIR/<point_hash>.parquet``, one row:

* the parameter columns, the summary columns of [`Result.summary`][vcpulab.sim.Result]
  and ``config_hash`` — the local sweep's row, column for column;
* ``error`` (String): null for a point that ran; otherwise
  ``"<ExceptionType>: <message>"``, and the summary columns are absent;
* ``config_json`` (String): the canonical JSON of the point's Config;
* ``vcpulab_version`` (String): the version of vcpulab that computed it
  (the worker's);
* ``point_hash`` (String): the file's name, checked when it is read.

A file is written as ``DIR/.<point_hash>.<pid>.<thread>.tmp``, fsynced, then
renamed with `os.replace`: a reader sees a whole file or none. (The
folder is fsynced about once a second and at the end: a rename lost in a
power cut costs recomputing that point.) On a new run, points whose file holds a result are
skipped; failed points are **retried**; files that cannot be read, or do not
hold exactly one row named by their own hash, are moved to
``DIR/.quarantine/`` and recomputed; temporary files are ignored (a crash
may leave them; they can be deleted when no sweep writes to DIR). Read a
whole dataset with [`read_dataset`][vcpulab.sim.distributed.read_dataset].

Limits
------
* Python policies ([`vcpulab.sim.policies.python`][]) travel pickled: on
  Dask (cloudpickle) a callable must be importable on the workers (defined
  in an installed module) or picklable by value; with other process
  executors it must pickle with `pickle`. An unpicklable one raises
  `ValueError` before anything is submitted. The point hash names a
  Python policy by its ``name`` only: change the name when you change its
  code, or use a fresh ``out``.
* ``results=True`` (full per-VM/vCPU frames) is local-only: the dataset
  holds summary rows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import hashlib
import itertools
import json
import logging
import math
import os
import pickle
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from vcpulab import _core
from vcpulab._frames import frame as _frame
from vcpulab.sim._config import Config
from vcpulab.sim._points import MAX_SWEEP_POINTS, Point, expand
from vcpulab.sim._run import _check_threads, _policies_for, local_sweep

__all__ = [
    "EXTRA_COLUMNS",
    "dask_executor",
    "executor_from_address",
    "point_hash",
    "read_dataset",
    "run_sweep",
]

log = logging.getLogger("vcpulab.sim.sweep")

#: Columns a distributed / checkpointed sweep adds after the local sweep's.
EXTRA_COLUMNS = ("error", "config_json", "vcpulab_version", "point_hash")

_SUFFIX = ".parquet"
_QUARANTINE = ".quarantine"


# ------------------------------------------------------------------ points


def _plain_param(name: str, v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    item = getattr(v, "item", None)  # numpy scalars
    if callable(item) and getattr(v, "shape", None) == ():
        return item()
    raise ValueError(
        f"sweep: parameter {name!r} = {v!r} is not a str, int, float, bool or None; "
        "a checkpointed or distributed sweep names points by their parameters"
    )


def point_hash(params: Mapping[str, Any], config: Config) -> str:
    """SHA-256 naming one point: its config hash and its parameters.

    Stable across processes, machines and runs (no Python ``hash()``)."""
    body = {"config_hash": config.config_hash(), "params": {k: _plain_param(k, v) for k, v in params.items()}}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ------------------------------------------------------------------ worker side


#: Nonces of the sweeps cancelled in this process (Ctrl-C): their points
#: running on this process's threads stop at their next interrupt poll.
_CANCELLED: set[str] = set()


def _run_batch(batch: Sequence[tuple[str, str, dict[str, Any]]], nonce: str) -> list[tuple[str, str | None, Any, str]]:
    """Run a batch of points in this (worker) process.

    ``batch``: ``(point_hash, config JSON, Python policies)`` per point.
    ``nonce``: the sweep's id plus a sequence number: makes each submission
    a distinct Dask task (Dask names "pure" tasks by their arguments, and a
    resubmitted batch must not be answered by the failed task of the same
    name); a run in this process stops when its sweep's id is in ``_CANCELLED``.

    Returns ``(point_hash, error, summary columns, vcpulab version)`` per
    point; ``error`` is None or ``"<Type>: <message>"`` (then no summary).
    """
    out: list[tuple[str, str | None, Any, str]] = []

    sweep_id = nonce.rsplit("-", 1)[0]

    def cancelled() -> bool:
        return sweep_id in _CANCELLED

    for key, cfg_json, pols in batch:
        if cancelled():
            raise KeyboardInterrupt("sweep cancelled")
        try:
            d = _core.sim_run(cfg_json, pols or None, cancelled)
            out.append((key, None, d["summary"], _core.__version__))
        except Exception as e:
            out.append((key, f"{type(e).__name__}: {e}", None, _core.__version__))
    return out


# ------------------------------------------------------------------ rows and files


def _row(
    params: Mapping[str, Any], cfg: Config, key: str, error: str | None, summary: Any, version: str
) -> pl.DataFrame:
    """One point's row: the local sweep's columns, then EXTRA_COLUMNS.

    Built from the same frames as the local sweep's row (``pl.DataFrame([params])``
    and the summary frame), so the dtypes are the same."""
    cols: list[pl.Series] = pl.DataFrame([dict(params)]).get_columns() if params else []
    if error is None:
        cols += [c for c in _frame(summary).get_columns() if c.name not in params]  # type: ignore[union-attr]
    cols.append(pl.Series("config_hash", [cfg.config_hash()], dtype=pl.String))
    cols += [
        pl.Series("error", [error], dtype=pl.String),
        pl.Series("config_json", [cfg.to_json()], dtype=pl.String),
        pl.Series("vcpulab_version", [version], dtype=pl.String),
        pl.Series("point_hash", [key], dtype=pl.String),
    ]
    return pl.DataFrame(cols)


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_point(out: Path, key: str, df: pl.DataFrame) -> None:
    """Write one point's file: temp name in the same folder, fsync, rename.

    The folder itself is fsynced by the caller now and then and at the end:
    a rename lost in a power cut costs recomputing that point, never a torn
    file (the file's bytes are on disk before the rename)."""
    import io

    tmp = out / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
    # Encoded in memory first: polars reports a failed write to a file as a
    # parquet ComputeError; a plain write() gives the OSError (ENOSPC, EDQUOT…).
    buf = io.BytesIO()
    df.write_parquet(buf)
    try:
        with open(tmp, "wb") as f:
            f.write(buf.getbuffer())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out / f"{key}{_SUFFIX}")
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OSError(e.errno, f"sweep: cannot write a point of the dataset: {e.strerror}", str(tmp)) from e
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _quarantine(out: Path, path: Path, why: str) -> None:
    q = out / _QUARANTINE
    q.mkdir(exist_ok=True)
    dest = q / f"{path.name}.{time.time_ns()}"
    log.warning("vcpulab.sim.sweep: %s is unreadable (%s); moved to %s, the point is recomputed", path, why, dest)
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, dest)


def _read_point(path: Path, key: str) -> pl.DataFrame | str:
    """The row stored in ``path``, or why it is not a valid point file."""
    try:
        df = pl.read_parquet(path)
    except FileNotFoundError:
        raise
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    missing = [c for c in EXTRA_COLUMNS if c not in df.columns]
    if missing:
        return f"no column(s) {missing}"
    if df.height != 1:
        return f"{df.height} rows instead of 1"
    if df["point_hash"][0] != key:
        return f"it holds point {df['point_hash'][0]!r}"
    return df


def read_dataset(out: str | os.PathLike[str]) -> pl.DataFrame:
    """Every valid point file of a dataset folder, as one DataFrame (rows in
    file-name order; failed points have a non-null ``error``). Temporary and
    quarantined files are ignored; an invalid file raises ValueError."""
    d = Path(out)
    rows = []
    for p in sorted(d.glob(f"*{_SUFFIX}")):
        if p.name.startswith("."):
            continue
        r = _read_point(p, p.name[: -len(_SUFFIX)])
        if isinstance(r, str):
            raise ValueError(f"{p}: not a valid point file: {r}")
        rows.append(r)
    return _assemble(rows)


def _assemble(rows: list[pl.DataFrame]) -> pl.DataFrame:
    """Concatenate rows like the local sweep (``diagonal_relaxed``), with
    EXTRA_COLUMNS last; the column order is taken from the rows that ran,
    so failed rows (no summary columns) do not reorder it."""
    if not rows:
        return pl.DataFrame()
    df = pl.concat(rows, how="diagonal_relaxed")
    ok = [r for r in rows if r["error"][0] is None]
    order = (
        pl.concat(ok + [r for r in rows if r["error"][0] is not None], how="diagonal_relaxed").columns
        if ok
        else df.columns
    )
    order = [c for c in order if c not in EXTRA_COLUMNS] + list(EXTRA_COLUMNS)
    return df.select(order)


# ------------------------------------------------------------------ executors


def _client_of(executor: cf.Executor) -> Any:
    """The dask.distributed Client behind ``Client.get_executor()``, or None."""
    c = getattr(executor, "_client", None)
    return c if c is not None and hasattr(c, "nthreads") else None


def _worker_slots(executor: cf.Executor) -> int:
    client = _client_of(executor)
    if client is not None:
        try:
            n = sum(client.nthreads().values())
        except Exception:
            n = 0
        return max(n, 1)
    n = getattr(executor, "_max_workers", None)
    return n if isinstance(n, int) and n > 0 else (os.cpu_count() or 1)


def _check_shippable(points: list[Point], executor: cf.Executor) -> None:
    if isinstance(executor, cf.ThreadPoolExecutor):
        return  # same process: nothing is pickled
    dask = _client_of(executor) is not None
    seen: set[int] = set()
    for i, (_, cfg) in enumerate(points):
        for name, fn in cfg.python_policies().items():
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            try:
                pickle.dumps(fn)
                continue
            except Exception as e:
                err: Exception = e
            if dask:
                try:
                    import cloudpickle

                    cloudpickle.dumps(fn)
                    continue
                except Exception as e:
                    err = e
            raise ValueError(
                f"sweep: point {i}: the Python policy {name!r} ({fn!r}) cannot be sent to other processes "
                f"({type(err).__name__}: {err}). Define it at module level in a module the workers can import "
                "(or make it picklable), or run the sweep locally (executor=None)."
            ) from err


def executor_from_address(address: str, **client_kwargs: Any) -> cf.Executor:
    """Connect a Dask ``distributed.Client`` to the scheduler at ``address``
    (e.g. ``"tcp://10.0.0.5:8786"``) and return ``client.get_executor()``.

    The client stays open as long as the executor is used; close it with
    ``executor._client.close()``, or use [`dask_executor`][vcpulab.sim.distributed.dask_executor], which does.
    Needs the ``dask`` extra: ``pip install 'vcpulab[dask]'``. The workers
    need vcpulab installed (the same version) to run the simulator.
    """
    try:
        from distributed import Client
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("a Dask sweep needs dask.distributed: pip install 'vcpulab[dask]'") from e
    return Client(address, **client_kwargs).get_executor()


@contextlib.contextmanager
def dask_executor(address: str, **client_kwargs: Any) -> Iterator[cf.Executor]:
    """``with dask_executor("tcp://host:8786") as ex: run_sweep(..., executor=ex)``:
    [`executor_from_address`][vcpulab.sim.distributed.executor_from_address], closing the client at the end."""
    ex = executor_from_address(address, **client_kwargs)
    try:
        yield ex
    finally:
        ex._client.close()  # type: ignore[attr-defined]


# ------------------------------------------------------------------ the sweep


def run_sweep(
    points: Config | Sequence[Config] | Sequence[tuple[Mapping[str, Any], Config]],
    grid: Mapping[str, Iterable[Any]] | None = None,
    *,
    executor: cf.Executor | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: bool = True,
    threads: int | None = None,
    batch_size: int | None = None,
    retries: int = 3,
    max_points: int | None = MAX_SWEEP_POINTS,
) -> pl.DataFrame:
    """Run a sweep on ``executor``, checkpointed to the dataset ``out``.

    ``points`` / ``grid``: as [`vcpulab.sim.sweep`][].

    * ``executor=None, out=None``: the local rayon sweep, unchanged.
    * ``executor``: any `concurrent.futures.Executor`, e.g. a Dask
      ``Client.get_executor()`` (see [`executor_from_address`][vcpulab.sim.distributed.executor_from_address]).
      ``None`` with ``out`` set: a thread pool of ``threads`` threads (None:
      all cores) in this process — the simulator releases the GIL.
    * ``out``: the dataset folder (created if needed). Points already there
      are not recomputed; failed points are; the returned frame is read back
      from the files.
    * ``batch_size``: points per task (None: enough tasks for ~8 per worker
      thread, at most 64 points each); ``2 × worker threads`` tasks are kept
      in flight. ``retries``: submissions of a task that dies before a
      point is recorded as failed.

    Returns one row per input point, in input order: the local sweep's
    columns (equal values for equal seeds) then [`EXTRA_COLUMNS`][vcpulab.sim.distributed.EXTRA_COLUMNS].
    Failed points have ``error`` set and null summary columns; nothing is
    raised for them — check ``df["error"].null_count() == df.height``.
    """
    if executor is None and out is None:
        return local_sweep(points, grid, threads=threads, progress=progress, max_points=max_points)  # type: ignore[return-value]
    if executor is not None and not isinstance(executor, cf.Executor):
        raise TypeError(f"sweep: executor must be a concurrent.futures.Executor, got {type(executor).__name__}")
    _check_threads(threads)
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"sweep: batch_size must be an int >= 1 or None, got {batch_size!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
        raise ValueError(f"sweep: retries must be an int >= 1, got {retries!r}")

    labelled = expand(points, grid, max_points)
    keys = [point_hash(p, c) for p, c in labelled]
    unique: dict[str, Point] = {}
    for k, pt in zip(keys, labelled):
        unique.setdefault(k, pt)

    outdir = Path(out) if out is not None else None
    rows: dict[str, pl.DataFrame] = {}  # point hash -> row: read from out at the start, or (no out) computed
    done: set[str] = set()
    if outdir is not None:
        outdir.mkdir(parents=True, exist_ok=True)
        n_failed = n_bad = 0
        versions: dict[str, int] = {}
        for k in unique:
            path = outdir / f"{k}{_SUFFIX}"
            try:
                r = _read_point(path, k)
            except FileNotFoundError:
                continue
            if isinstance(r, str):
                _quarantine(outdir, path, r)
                n_bad += 1
            elif r["error"][0] is not None:
                n_failed += 1
            else:
                done.add(k)
                rows[k] = r
                v = r["vcpulab_version"][0]
                versions[v] = versions.get(v, 0) + 1
        other = {v: c for v, c in versions.items() if v != _core.__version__}
        if other:
            log.warning(
                "vcpulab.sim.sweep: %d point(s) in %s were computed by another vcpulab version (%s; this is %s) "
                "and are reused; use a fresh out= to recompute them",
                sum(other.values()),
                outdir,
                ", ".join(f"{v}: {c}" for v, c in sorted(other.items())),
                _core.__version__,
            )
        log.info(
            "vcpulab.sim.sweep: %d points, %d already in %s, %d failed before (retried), %d unreadable (recomputed), %d to run",
            len(unique),
            len(done),
            outdir,
            n_failed,
            n_bad,
            len(unique) - len(done),
        )
    todo = [k for k in unique if k not in done]

    own = executor is None
    ex: cf.Executor = cf.ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) if own else executor  # type: ignore[assignment]
    try:
        if todo:
            _check_shippable([unique[k] for k in todo], ex)
            _run(ex, own, todo, unique, outdir, rows, progress, len(unique), batch_size, retries)
    finally:
        if own:
            ex.shutdown(wait=False, cancel_futures=True)

    result_rows = []
    for k in keys:
        if k in rows:  # read at the start (out) or kept in memory (no out)
            result_rows.append(rows[k])
            continue
        assert outdir is not None  # a point not kept in memory was written to out
        r = _read_point(outdir / f"{k}{_SUFFIX}", k)
        if isinstance(r, str):
            raise RuntimeError(f"sweep: {outdir / (k + _SUFFIX)} became unreadable after it was written: {r}")
        result_rows.append(r)
    return _assemble(result_rows)


def _run(
    ex: cf.Executor,
    own: bool,
    todo: list[str],
    unique: Mapping[str, Point],
    outdir: Path | None,
    rows: dict[str, pl.DataFrame],
    progress: bool,
    total: int,
    batch_size: int | None,
    retries: int,
) -> None:
    slots = _worker_slots(ex)
    if batch_size is None:
        batch_size = 1 if own else max(1, min(64, math.ceil(len(todo) / (8 * slots))))
    in_flight_max = 2 * slots
    sweep_id = uuid.uuid4().hex
    seq = itertools.count()
    broken: list[BaseException] = []  # the executor's BrokenExecutor, once seen

    def payload(batch: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
        # a deep copy per point (shared objects would carry state between points)
        return [(k, unique[k][1].to_json(), _policies_for(unique[k][1])) for k in batch]

    queue: deque[tuple[list[str], int]] = deque((todo[i : i + batch_size], 1) for i in range(0, len(todo), batch_size))
    inflight: dict[cf.Future[Any], tuple[list[str], int]] = {}
    recorded: set[str] = set()
    bar = None
    if progress:
        try:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, initial=total - len(todo), desc="vcpulab.sim.sweep", leave=False)
        except ImportError:  # pragma: no cover - tqdm is a dependency
            bar = None
    n_err = 0
    synced = [time.monotonic()]

    def record(key: str, error: str | None, summary: Any, version: str) -> None:
        nonlocal n_err
        if key in recorded:  # a task delivered twice: keep the first
            return
        params, cfg = unique[key]
        row = _row(params, cfg, key, error, summary, version)
        if outdir is not None:
            _write_point(outdir, key, row)
            if time.monotonic() - synced[0] > 1.0:
                _fsync_dir(outdir)
                synced[0] = time.monotonic()
        else:
            rows[key] = row
        recorded.add(key)
        if error is not None:
            n_err += 1
            log.warning("vcpulab.sim.sweep: point %s (%s) failed: %s", key[:12], params, error)
        if bar is not None:
            bar.update(1)
            if n_err:
                bar.set_postfix(failed=n_err, refresh=False)

    def collect(fut: cf.Future[Any], batch: list[str], attempt: int) -> None:
        try:
            res = fut.result()
        except (Exception, asyncio.CancelledError) as e:  # the task, not a point, failed
            if isinstance(e, cf.BrokenExecutor):
                fail_broken(batch, e)
                return
            if attempt < retries:
                log.warning(
                    "vcpulab.sim.sweep: a task of %d point(s) failed (%s: %s); resubmitting (attempt %d of %d)",
                    len(batch),
                    type(e).__name__,
                    e,
                    attempt + 1,
                    retries,
                )
                # Alone, a point that kills its worker cannot take others with it.
                queue.extendleft(([k], attempt + 1) for k in reversed(batch))
            else:
                for k in batch:
                    record(k, f"{type(e).__name__}: the task failed {attempt} times: {e}", None, _core.__version__)
            return
        for key, error, summary, version in res:
            record(key, error, summary, version)

    def fail_broken(batch: list[str], e: BaseException) -> None:
        if not broken:
            broken.append(e)
            log.warning(
                "vcpulab.sim.sweep: the executor is broken (%s: %s) and runs nothing more; the points not finished "
                "are recorded as failed. Run the sweep again with a new executor to compute them",
                type(e).__name__,
                e,
            )
        for k in batch:
            record(
                k, f"{type(e).__name__}: the executor broke before this point finished: {e}", None, _core.__version__
            )

    refreshed = time.monotonic()
    try:
        while queue or inflight:
            if time.monotonic() - refreshed > 5.0:  # an adaptive cluster may have grown or shrunk
                in_flight_max = 2 * _worker_slots(ex)
                refreshed = time.monotonic()
            while queue and len(inflight) < in_flight_max:
                batch, attempt = queue.popleft()
                if broken:
                    fail_broken(batch, broken[0])
                    continue
                try:
                    fut = ex.submit(_run_batch, payload(batch), f"{sweep_id}-{next(seq)}")
                except cf.BrokenExecutor as e:
                    fail_broken(batch, e)
                    continue
                inflight[fut] = (batch, attempt)
            if not inflight:
                continue
            # a timeout, so that Ctrl-C (delivered to this thread) is seen promptly
            finished, _ = cf.wait(list(inflight), timeout=0.2, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                batch, attempt = inflight.pop(fut)
                collect(fut, batch, attempt)
    except BaseException:
        # Ctrl-C (or a failure writing the dataset): keep what already
        # arrived, cancel the rest (also the points running on this
        # process's threads), re-raise.
        _CANCELLED.add(sweep_id)
        for fut in list(inflight):
            fut.cancel()
        with contextlib.suppress(BaseException):
            for fut in list(inflight):
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    for key, error, summary, version in fut.result():
                        record(key, error, summary, version)
        raise
    finally:
        if outdir is not None:
            _fsync_dir(outdir)
        if bar is not None:
            bar.close()
        if own:
            # our threads: wait for the cancelled points to stop (fast), then
            # forget the id (another executor's threads may still need it)
            with contextlib.suppress(BaseException):
                cf.wait(list(inflight), timeout=5.0)
            _CANCELLED.discard(sweep_id)
