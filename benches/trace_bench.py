"""What tracing costs: IO-exit round trips with tracing off and on.

One vCPU runs ``io_loop`` (an ``out`` to port 0x80 per iteration; every one is
an exit to user space) pinned to one host CPU, with the loop in Rust
(``Vcpu.run_until``) and with one Python call per exit (``Vcpu.run``). "on"
records the tracepoints of docs/tracing.md on all CPUs this process may use
(``vcpulab.tracing.Trace``) as ``run(..., trace=True)`` does: the vCPU's run
loop times its exits (``Trace(vcpus=[v])``), including decoding by the reader
thread; "kernel" records the exits with the kernel's two records per exit
instead (``kvm_userspace_exit``, ``kvm_fpu``: a ``Trace`` without ``vcpus``,
as before 0.3.20). The frames are built after the clock stops and timed
separately.

    python benches/trace_bench.py [--exits 20000] [--repeat 5]

Rounds interleave off and on, so a shared machine's load moves both alike;
the median and best round of each are printed. Not a test: the numbers go
into the issue notes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

from vcpulab import _core, tracing
from vcpulab.kvm import Host


def round_trips(host: Host, exits: int, traced: str, python_loop: bool) -> dict[str, float]:
    cpus = sorted(os.sched_getaffinity(0))
    with host.create_vm(memory_mib=2, irqchip=False) as vm:
        prog = vm.load("io_loop", port=0x80, count=exits)
        v = vm.create_vcpu(0)
        v.start(prog)
        tr = None
        if traced == "on":
            tr = tracing.Trace(cpus, vcpus=[v])
        elif traced == "kernel":
            tr = tracing.Trace(cpus)
        try:
            t0 = _core.monotonic_ns()
            if python_loop:
                n = 0
                while n < exits:
                    e = v.run(timeout_s=10)
                    if e.kind == "io" and e.port == 0x80:
                        n += 1
            else:
                r = v.run_until("io", count=exits, port=0x80, timeout_s=120)
                assert r.matches == exits
            t1 = _core.monotonic_ns()
            out = {"per_s": exits / ((t1 - t0) / 1e9)}
            if tr is not None:
                f0 = time.perf_counter()
                f = tr.frames(t0, t1, [(threading.get_native_id(), 0, 0)])
                out["stop_frames_s"] = time.perf_counter() - f0
                out["events"] = f.info["events"]
                out["truncated"] = f.info["truncated"]
                out["exit_rows"] = f.exits.height
                out["exits_source"] = f.info["exits_source"]
        finally:
            if tr is not None:
                tr.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exits", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)), help="host CPU of the vCPU thread")
    a = ap.parse_args()
    os.sched_setaffinity(0, [a.cpu])
    host = Host()
    res: dict[str, list[dict[str, float]]] = {}
    for _ in range(a.repeat):
        for loop in ("run_until", "python"):
            for traced in ("off", "on", "kernel"):
                key = f"{loop}_{traced}"
                res.setdefault(key, []).append(round_trips(host, a.exits, traced, loop == "python"))
    summary: dict[str, object] = {"exits": a.exits, "repeat": a.repeat, "cpu": a.cpu}
    for key, rounds in res.items():
        rates = [r["per_s"] for r in rounds]
        summary[f"{key}_per_s_median"] = round(statistics.median(rates))
        summary[f"{key}_per_s_best"] = round(max(rates))
        if "stop_frames_s" in rounds[0]:
            summary[f"{key}_stop_frames_s_median"] = round(statistics.median(r["stop_frames_s"] for r in rounds), 4)
            summary[f"{key}_events"] = rounds[0]["events"]
            summary[f"{key}_exit_rows"] = rounds[0]["exit_rows"]
            summary[f"{key}_truncated"] = any(r["truncated"] for r in rounds)
            summary[f"{key}_exits_source"] = rounds[0]["exits_source"]
    for loop in ("run_until", "python"):
        off = res[f"{loop}_off"]
        for traced in ("on", "kernel"):
            on = res[f"{loop}_{traced}"]
            # each round's traced rate over the untraced one run just before it (a drifting host moves both)
            ratios = [b["per_s"] / a["per_s"] for a, b in zip(off, on)]
            summary[f"{loop}_{traced}_over_off_median"] = round(statistics.median(ratios), 3)
            summary[f"{loop}_{traced}_over_off_rounds"] = [round(x, 3) for x in ratios]
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
