"""vcpulab's Python API against a plain Rust kvm-ioctls loop doing the same work.

Measures, in one run: VM create/close, and IO-exit round trips both with the
loop kept in Rust (``run_until``) and with one Python call per exit. The
baseline is ``examples/bench_raw_kvm.rs`` (kvm-ioctls only), twice: a
3-instruction real-mode guest set up by hand, and a plain ``VcpuFd::run`` loop
on vcpulab's own ``io_loop`` guest (long mode with paging), which is the same
work as vcpulab's loops. Where guest code is emulated (kvm_pvm) the guest's mode
alone changes the exit rate, so "same guest" is the comparison for the cost of
vcpulab's layers.

    python benches/bench_kvm.py [--cycles 200] [--exits 10000] [--repeat 5]

``--repeat N`` interleaves N rounds of (raw, vcpulab) and reports each
ratio's median and best round, so a shared machine's load moves both sides
alike instead of skewing one. Not a test: the numbers go into the issue notes.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path

from vcpulab.kvm import Host

ROOT = Path(__file__).resolve().parent.parent


def rust_baseline(cycles: int, exits: int) -> dict[str, float]:
    out = subprocess.run(
        ["cargo", "run", "--quiet", "--release", "--example", "bench_raw_kvm", "--", str(cycles), str(exits)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def python_api(cycles: int, exits: int) -> dict[str, float]:
    host = Host()
    t = time.perf_counter()
    for _ in range(cycles):
        with host.create_vm(memory_mib=2, irqchip=False) as vm:
            vm.create_vcpu(0)
    create_close = cycles / (time.perf_counter() - t)

    with host.create_vm(memory_mib=2, irqchip=False) as vm:
        prog = vm.load("io_loop", port=0x80, count=exits)
        v = vm.create_vcpu(0)
        v.start(prog)
        t = time.perf_counter()
        r = v.run_until("io", count=exits, port=0x80, timeout_s=120)
        rust_loop = exits / (time.perf_counter() - t)
        assert r.matches == exits

        v.start(prog)
        t = time.perf_counter()
        n = 0
        while n < exits:
            e = v.run(timeout_s=10)
            if e.kind == "io" and e.port == 0x80:
                n += 1
        py_loop = exits / (time.perf_counter() - t)
    return {"create_close_per_s": create_close, "io_run_until_per_s": rust_loop, "io_python_per_s": py_loop}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--exits", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    import os
    import statistics

    rounds = []
    for _ in range(max(1, a.repeat)):
        rounds.append((rust_baseline(a.cycles, a.exits), python_api(a.cycles, a.exits)))
    print(
        f"host: {platform.node()} {platform.machine()}, kernel {platform.release()}, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'work':<40}{'raw kvm-ioctls':>16}{'vcpulab':>12}{'vcpulab/raw':>13}{'best round':>12}")
    rows = [
        ("VM create+close (/s)", "create_close_per_s", "create_close_per_s"),
        ("IO exits, loop in Rust (/s)", "io_exits_per_s", "io_run_until_per_s"),
        ("IO exits, one Python call each (/s)", "io_exits_per_s", "io_python_per_s"),
        ("same guest: loop in Rust (/s)", "io_exits_vcpulab_guest_per_s", "io_run_until_per_s"),
        ("same guest: one Python call each (/s)", "io_exits_vcpulab_guest_per_s", "io_python_per_s"),
    ]
    for name, rk, pk in rows:
        r = statistics.median(x[rk] for x, _ in rounds)
        p = statistics.median(y[pk] for _, y in rounds)
        ratios = [y[pk] / x[rk] for x, y in rounds]
        print(f"{name:<40}{r:>16,.0f}{p:>12,.0f}{statistics.median(ratios):>12.2f}x{max(ratios):>11.2f}x")
    # the same guest program both ways: what one Python call per exit costs next to run_until
    same = [y["io_python_per_s"] / y["io_run_until_per_s"] for _, y in rounds]
    print(
        f"{'one Python call each / loop in Rust':<40}{'':>16}{'':>12}{statistics.median(same):>12.2f}x{max(same):>11.2f}x"
    )


if __name__ == "__main__":
    main()
