"""What a simulator trace costs: rows, memory, CPU, and a sched map of a window.

Runs the [S4] 8 × 20 PLE yield storm (``sim.scenarios.sched_map_2012(8, 20)``,
80 host CPUs) for ``--duration-s`` simulated seconds untraced and traced,
each in a fresh process (so peak RSS is that run's), and prints one JSON
object: the trace's rows, bytes a row in the frame (polars'
``estimated_size``), peak RSS of each process, CPU seconds of each run and
their ratio, and the CPU time to render the sched map of a 30 ms window
(1 µs a pixel, 80 rows: what [S4]'s pictures show) from the whole trace.

    python benches/sim_trace_bench.py [--duration-s 1.0] [--repeat 1]

Not a test: the numbers go into the issue notes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = r"""
import json, resource, sys, time
from vcpulab import plot, sim
from vcpulab.sim import scenarios
dur_ns, traced = int(sys.argv[1]), sys.argv[2] == "1"
cfg = scenarios.sched_map_2012(8, 20, duration_ns=dur_ns)
c0 = time.process_time()
r = sim.run(cfg, trace=traced, trace_max_rows=None)
run_cpu_s = time.process_time() - c0
out = {"run_cpu_s": run_cpu_s, "ops": int(r.summary["ops"][0])}
if traced:
    t = r.trace
    out["rows"] = t.height
    out["frame_bytes_per_row"] = t.estimated_size() / max(t.height, 1)
    out["dtypes"] = {k: str(v) for k, v in t.schema.items()}
    mid = dur_ns // 2
    c0 = time.process_time()
    codes = plot.sched_map_codes(r, 1.0, start_ns=mid, end_ns=mid + 30_000_000)
    out["map_30ms_cpu_s"] = time.process_time() - c0
    out["map_shape"] = list(codes.shape)
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def child(dur_ns: int, traced: bool) -> dict[str, object]:
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(dur_ns), "1" if traced else "0"], capture_output=True, text=True, check=False
    )
    if p.returncode != 0:
        raise SystemExit(f"child failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration-s", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    dur_ns = int(a.duration_s * 1e9)
    t0 = time.time()
    rounds = []
    for _ in range(a.repeat):
        off, on = child(dur_ns, False), child(dur_ns, True)
        rounds.append({"untraced": off, "traced": on, "traced_over_untraced_cpu": on["run_cpu_s"] / off["run_cpu_s"]})  # type: ignore[operator]
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(
        json.dumps(
            {"duration_s": a.duration_s, "rounds": rounds, "loadavg": load, "wall_s": time.time() - t0}, indent=1
        )
    )


if __name__ == "__main__":
    main()
