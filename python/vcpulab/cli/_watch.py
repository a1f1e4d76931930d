"""``vcpulab watch`` and ``vcpulab trace``: another process's VMs, as a live per-vCPU table or a kernel trace."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vcpulab.cli._common import _Failed, _say
from vcpulab.cli._sim import _parquet_meta


def _attach(pid: int) -> Any:
    """``vcpulab.kvm.attach(pid)``; why it failed as a `_Failed` (status 1)."""
    from vcpulab.kvm import attach

    try:
        return attach(pid)
    except (ProcessLookupError, LookupError, PermissionError) as e:
        raise _Failed(e) from e


def _qemu_guest_name(cmdline: Sequence[str]) -> str | None:
    """The guest name of a QEMU command line: ``-name NAME`` or ``-name
    guest=NAME,...`` (also ``--name``; ``,,`` is QEMU's escaped comma); None
    without one."""
    for i, arg in enumerate(cmdline[:-1]):
        if arg in ("-name", "--name"):
            items = cmdline[i + 1].replace(",,", "\0").split(",")
            for n, item in enumerate(items):
                if item.startswith("guest="):
                    return item[len("guest=") :].replace("\0", ",")
                if n == 0 and "=" not in item:
                    return item.replace("\0", ",")
            return None
    return None


def _kvm_processes() -> list[dict[str, Any]]:
    """The processes (other than this one) that hold a KVM VM
    (``anon_inode:kvm-vm`` among their fds), by pid: pid, comm, cmdline (its
    arguments) and guest (QEMU's ``-name``, or None). Processes whose fds
    cannot be read are left out."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        d = Path(entry.path)
        try:
            fds = os.listdir(d / "fd")
        except OSError:  # gone, or not ours to read
            continue
        holds_vm = False
        for fd in fds:
            try:
                if os.readlink(d / "fd" / fd) == "anon_inode:kvm-vm":
                    holds_vm = True
                    break
            except OSError:
                continue
        if not holds_vm:
            continue
        try:
            comm = (d / "comm").read_text().strip()
            cmdline = [a.decode(errors="replace") for a in (d / "cmdline").read_bytes().split(b"\0")[:-1]]
        except OSError:
            continue
        found.append({"pid": int(entry.name), "comm": comm, "cmdline": cmdline, "guest": _qemu_guest_name(cmdline)})
    return sorted(found, key=lambda p: p["pid"])


def _describe(procs: Sequence[dict[str, Any]]) -> str:
    if not procs:
        return "none"
    return ", ".join(f"{p['pid']} ({p['comm']}" + (f", guest {p['guest']}" if p["guest"] else "") + ")" for p in procs)


def _matches_guest(proc: dict[str, Any], name: str) -> bool:
    """``--guest NAME``: QEMU's guest name, the comm, or the program's file name."""
    argv0 = os.path.basename(proc["cmdline"][0]) if proc["cmdline"] else ""
    return name in (proc["guest"], proc["comm"], argv0)


def _watched_pid(args: argparse.Namespace) -> int:
    """The process ``vcpulab watch`` watches: PID, ``--pid PID``, or the one KVM
    process ``--guest NAME`` matches; else a `_Failed` naming the candidates."""
    pid = args.pid if args.pid is not None else args.pid_option
    if pid is not None:
        return int(pid)
    procs = _kvm_processes()
    if args.guest is None:
        raise _Failed(
            ValueError(f"watch needs a process: PID, --pid PID or --guest NAME (KVM processes: {_describe(procs)})"),
            code=2,
        )
    hits = [p for p in procs if _matches_guest(p, args.guest)]
    if not hits:
        raise _Failed(
            LookupError(
                f"--guest {args.guest!r}: no KVM process has that guest name (QEMU's -name), comm or program "
                f"name (KVM processes: {_describe(procs)})"
            )
        )
    if len(hits) > 1:
        raise _Failed(
            LookupError(
                f"--guest {args.guest!r} matches {len(hits)} KVM processes: {_describe(hits)}; choose one with --pid"
            )
        )
    return int(hits[0]["pid"])


def cmd_watch(args: argparse.Namespace) -> int:
    """A kvm_stat-like live table of another process's vCPU threads, until
    COUNT tables, Ctrl-C, or the process's exit (then one line, status 0)."""
    if args.log and not Path(args.log).parent.is_dir():
        raise ValueError(f"--log: the folder {Path(args.log).parent} does not exist")
    if args.json and args.refresh:
        raise _Failed(ValueError("--refresh redraws a table; --json prints one object per interval"), code=2)
    a = _attach(_watched_pid(args))
    with a:
        return _watch(a, args)


#: what a redraw starts with: cursor home, clear the screen (as kvm_stat's
#: curses screen does)
_CLEAR_SCREEN = "\x1b[H\x1b[2J"


def _redraws(args: argparse.Namespace, isatty: bool) -> bool:
    """Whether ``vcpulab watch`` redraws its table in place: ``--refresh`` /
    ``--no-refresh`` as given; by default when stdout is a terminal and the
    output is the table (not ``--json``)."""
    if args.refresh is not None:
        return bool(args.refresh)
    return isatty and not args.json


def _watch_rates(cur_t: Any, prev_t: Any, cur_v: Any, prev_v: Any, dt: int) -> tuple[Any, int, list[dict[str, Any]]]:
    """One interval's rates: the per-vCPU-thread table (None when no vCPU
    thread is alive), the interval's ns, and the per-VM stat rates."""
    import polars as pl

    tab = None
    j = cur_t.join(prev_t, on=["vm", "vcpu", "tid"], suffix="_0")
    if j.height:
        dt = int((j["t_ns"] - j["t_ns_0"]).max())  # type: ignore[arg-type]
        tab = j.select(
            "vm",
            "vcpu",
            "tid",
            ((pl.col("cpu_ns") - pl.col("cpu_ns_0")) / dt * 100).round(1).alias("cpu_%"),
            ((pl.col("run_delay_ns") - pl.col("run_delay_ns_0")) / dt * 100).round(1).alias("run_delay_%"),
            ((pl.col("voluntary_ctxt_switches") - pl.col("voluntary_ctxt_switches_0")) * 1e9 / dt)
            .round(0)
            .alias("vol_cs_per_s"),
            ((pl.col("nonvoluntary_ctxt_switches") - pl.col("nonvoluntary_ctxt_switches_0")) * 1e9 / dt)
            .round(0)
            .alias("invol_cs_per_s"),
            *[
                ((pl.col(k) - pl.col(k + "_0")) * 1e9 / dt).round(0).alias(f"{k}_per_s")
                for k in ("exits", "halt_exits", "halt_successful_poll")
                if k in j.columns
            ],
        ).sort(["vm", "vcpu"])
    vms: list[dict[str, Any]] = []
    if cur_v.height and prev_v.height:
        keys = [
            k for k in ("exits", "halt_exits", "halt_successful_poll", "halt_wakeup", "io_exits") if k in cur_v.columns
        ]
        for r in cur_v.join(prev_v, on="vm", suffix="_0").iter_rows(named=True) if keys else ():
            vms.append({"vm": r["vm"], **{f"{k}_per_s": round((r[k] - r[k + "_0"]) * 1e9 / dt) for k in keys}})
    return tab, dt, vms


def _watch(a: Any, args: argparse.Namespace) -> int:
    import csv

    import polars as pl

    say = (lambda m: print(m, file=sys.stderr)) if args.json else print
    head = "\n".join(
        [f"watching pid {a.pid} ({a.comm}): {a.vms.height} VM(s), {a.vcpus.height} vCPU(s)"]
        + [f"  note: {n}" for n in a.notes]
    )
    say(head)
    redraw = _redraws(args, sys.stdout.isatty())
    count = 1 if args.once else args.count
    log = open(args.log, "w", newline="") if args.log else None
    writer: Any = None
    frames_t, frames_v = [], []
    prev_t, prev_v = a.sample_once()
    t_first = time.monotonic_ns()
    i = 0
    try:
        while count is None or i < count:
            if a.wait_exited(args.interval_s):  # by its pidfd: ends within the interval after the process
                say(f"-- {time.strftime('%H:%M:%S')}: process {a.pid} ({a.comm}) exited; watch ends")
                break
            cur_t, cur_v = a.sample_once()
            frames_t.append(cur_t)
            frames_v.append(cur_v)
            dt = max((time.monotonic_ns() - t_first) if not i else 1, 1)
            tab, dt, vms = _watch_rates(cur_t, prev_t, cur_v, prev_v, dt)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            if args.json:
                rows = tab.to_dicts() if tab is not None else []
                print(
                    json.dumps({"time": stamp, "pid": a.pid, "interval_ns": dt, "vcpus": rows, "vms": vms}), flush=True
                )
            else:
                if tab is not None:
                    with pl.Config(
                        tbl_rows=64,
                        tbl_cols=-1,
                        tbl_width_chars=250,
                        tbl_hide_dataframe_shape=True,
                        tbl_hide_column_data_types=True,
                    ):
                        lines = [f"-- {time.strftime('%H:%M:%S')}\n{tab.drop('vm') if a.vms.height <= 1 else tab}"]
                    for v in vms:
                        lines.append(
                            f"   VM fd {v['vm']}: " + ", ".join(f"{k} {x:,}/s" for k, x in v.items() if k != "vm")
                        )
                else:
                    lines = [f"-- {time.strftime('%H:%M:%S')}: no vCPU thread alive"]
                if redraw:  # the whole screen again: the header, then this interval
                    print(_CLEAR_SCREEN + head + "\n" + "\n".join(lines), flush=True)
                else:
                    print("\n".join(lines), flush=True)
            if log is not None and tab is not None:
                if writer is None:
                    writer = csv.writer(log)
                    writer.writerow(["time", *tab.columns])
                for r in tab.iter_rows():
                    writer.writerow([stamp, *r])
                log.flush()
            prev_t, prev_v = cur_t, cur_v
            i += 1
    except KeyboardInterrupt:
        pass
    finally:
        if log is not None:
            log.close()
    if args.parquet and frames_t:
        out = Path(args.parquet)
        meta = _parquet_meta({"vcpulab.watch_pid": str(a.pid), "vcpulab.watch_comm": str(a.comm)})
        pl.concat(frames_t).write_parquet(out, metadata=meta)
        say(f"wrote {out}")
        if any(f.height for f in frames_v):
            vm_out = out.with_name(out.stem + "_vm_stats" + out.suffix)
            pl.concat([f for f in frames_v if f.height], how="diagonal_relaxed").write_parquet(vm_out, metadata=meta)
            say(f"wrote {vm_out}")
    return 0


#: why a trace's exit table can be empty, by its exits source (docs/tracing.md, "Run.exits")
_NO_EXITS_WHY = {
    "kvm_userspace_exit": "only exits to the VMM's user space are rows; those KVM handles in the kernel "
    "(halts, interrupts, in-kernel MMIO, instruction emulation) are not (docs/tracing.md); halts are below",
    "": "exits KVM handles in the kernel are not rows (docs/tracing.md); halts are below",
}


def cmd_trace(args: argparse.Namespace) -> int:
    """Traces another process's vCPU threads for a while (docs/tracing.md) and
    prints exits by reason, halts and wake-up latency per vCPU."""
    import polars as pl

    from vcpulab.analysis import exits_by_reason, wakeup_latency

    say = _say(args)
    a = _attach(args.pid)
    say(f"tracing pid {a.pid} ({a.comm}) for {args.duration_s:g} s: {a.vcpus.height} vCPU thread(s)")
    try:
        f = a.trace(duration_s=args.duration_s)
    finally:
        a.close()
    info = f.info
    counts = ", ".join(f"{k} {v}" for k, v in sorted(info["counts"].items()))
    say(f"CPUs {info['cpus']}: {info['events']} events ({counts})" + ("; TRUNCATED" if info["truncated"] else ""))
    with pl.Config(
        tbl_rows=32, tbl_cols=-1, tbl_width_chars=200, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True
    ):
        say(f"exits by reason (from {info['exits_source']}):")
        say(exits_by_reason(f.exits).select("reason", "count", "handling_p50_ns", "handling_p99_ns"))
        if f.exits.height == 0:
            say(
                f"  (no exits to user space in the trace: {_NO_EXITS_WHY.get(info['exits_source'], _NO_EXITS_WHY[''])})"
            )
        h = (
            f.halts.group_by("vcpu")
            .agg(
                pl.len().alias("halts"),
                pl.col("polled").sum().alias("polled"),
                pl.col("ns").median().alias("halt_p50_ns"),
            )
            .sort("vcpu")
        )
        say("halts:")
        say(h)
        say("wake-up to run:")
        say(wakeup_latency(f.wakeups).select("vcpu", "tid", "count", "latency_p50_ns", "latency_p99_ns"))
    files: list[str] = []
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("trace", "wakeups", "exits", "halts"):
            getattr(f, name).write_parquet(out / f"{name}.parquet")
            files.append(str(out / f"{name}.parquet"))
        say(f"wrote {out}/{{trace,wakeups,exits,halts}}.parquet")
    if args.perfetto:
        from vcpulab.export import to_perfetto

        pf = to_perfetto(f, args.perfetto)
        files.append(str(pf))
        say(f"wrote {pf} (open it in https://ui.perfetto.dev)")
    if args.json:
        keys = ("cpus", "events", "lost", "dropped", "malformed", "truncated", "exits_source", "complete_until_ns")
        doc = {
            "pid": a.pid,
            "comm": a.comm,
            "vcpu_threads": a.vcpus.height,
            "duration_s": args.duration_s,
            "window_ns": info.get("window_ns"),
            **{k: info.get(k) for k in keys},
            "counts": info["counts"],
            "rows": {name: getattr(f, name).height for name in ("trace", "wakeups", "exits", "halts")},
            "files": files,
        }
        print(json.dumps(doc, indent=2, default=str))
    return 0
