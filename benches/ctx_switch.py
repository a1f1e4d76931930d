"""Direct cost of a host context switch between two processes on one CPU
(not a test): Ousterhout's two-pipe method as Li, Ding and Shen use it
("Quantifying The Cost of Context Switch", C. Li, C. Ding, K. Shen,
ExpCS 2007, https://www.cs.rochester.edu/u/cli/research/switch.htm): two
processes pinned to one CPU pass a byte back and forth through two pipes,
so each pass is one switch; one process doing the same writes and reads on
its own pipe gives the cost of everything but the switch. Their
difference per pass is the direct cost of a switch (registers, the
scheduler, the address space; no cache refill: no data is touched).

    python benches/ctx_switch.py            # CPU: the last allowed one
    python benches/ctx_switch.py --cpu 1 --passes 200000 --repeat 7

A vCPU thread's switch adds KVM's vcpu_put / vcpu_load (VMCS or VMCB load,
user-return MSRs), which this does not measure: on this host guests are
emulated (kvm_pvm), so that part is not the hardware's here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def _single(passes: int) -> float:
    r, w = os.pipe()
    b = b"x"
    t0 = time.perf_counter_ns()
    for _ in range(passes):
        os.write(w, b)
        os.read(r, 1)
    dt = time.perf_counter_ns() - t0
    os.close(r)
    os.close(w)
    return dt / passes


def _switch(passes: int) -> float:
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    half = passes // 2
    pid = os.fork()
    if pid == 0:
        try:
            for _ in range(half):
                os.read(a_r, 1)
                os.write(b_w, b"x")
        finally:
            os._exit(0)
    t0 = time.perf_counter_ns()
    for _ in range(half):
        os.write(a_w, b"x")
        os.read(b_r, 1)
    dt = time.perf_counter_ns() - t0
    os.waitpid(pid, 0)
    for fd in (a_r, a_w, b_r, b_w):
        os.close(fd)
    return dt / (2 * half)  # one write and one read per pass, as in _single


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    ap.add_argument("--passes", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    os.sched_setaffinity(0, {a.cpu})
    direct = []
    for _ in range(a.repeat):
        s, w = _single(a.passes), _switch(a.passes)
        direct.append(w - s)
        print(f"  one process {s:7.0f} ns/pass, two processes {w:7.0f} ns/pass: switch {w - s:6.0f} ns")
    load = os.getloadavg()[0]
    print(
        f"direct context switch on CPU {a.cpu}: median {statistics.median(direct):.0f} ns, "
        f"min {min(direct):.0f} ns over {a.repeat} rounds of {a.passes} passes (load average {load:.1f})"
    )


if __name__ == "__main__":
    main()
