"""Does the real-KVM test suite pass N times in a row, and how often did it re-measure?

Runs ``pytest -m kvm`` (the tests marked by vcpulab's plugin) ``--runs`` times
in a row, optionally with a CPU hog (a busy loop pinned to one host CPU, the
way a build job or a noisy neighbour would be), and prints, per run, the
outcome and, per test that uses :func:`vcpulab.testing.remeasure`, how many
measurements each call needed (1 = the first was trusted; a negative number:
all were disturbed and the test skipped naming the disturbance).

    python benches/kvm_flake.py --runs 5                 # idle machine
    python benches/kvm_flake.py --runs 1 --hog 0         # a hog on CPU 0 (the experiments use CPU 1)
    python benches/kvm_flake.py --runs 5 -- tests/test_kvm_halt_poll.py   # a subset

Not a test: its output goes into the issue notes. Run it in a fresh clone
(``git clone`` + ``pip install '.[test]'``) to include first-run effects.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def hog(cpu: int) -> subprocess.Popen[bytes]:
    """A busy loop pinned to ``cpu`` in its own process."""
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--hog", type=int, default=None, metavar="CPU", help="pin a busy loop to this host CPU")
    ap.add_argument("pytest_args", nargs="*", help="after --: what pytest runs (default: every kvm-marked test)")
    a = ap.parse_args()
    hogp = hog(a.hog) if a.hog is not None else None
    tries: dict[str, list[int]] = defaultdict(list)
    results = []
    try:
        for i in range(1, a.runs + 1):
            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp) / "remeasure.jsonl"
                env = dict(os.environ, VCPULAB_REMEASURE_LOG=str(log))
                cmd = [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "-m",
                    "kvm",
                    *(a.pytest_args or ["tests"]),
                ]
                t = time.monotonic()
                p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
                wall = time.monotonic() - t
                tail = [
                    ln for ln in p.stdout.splitlines() if "passed" in ln or "failed" in ln or "real-KVM tests" in ln
                ]
                results.append((i, p.returncode, wall, tail[-2:] if tail else [p.stdout[-300:]]))
                if log.exists():
                    for line in log.read_text().splitlines():
                        for name, counts in json.loads(line).items():
                            tries[name].extend(counts)
                print(f"run {i}: rc={p.returncode} {wall:.0f} s  " + " | ".join(results[-1][3]), flush=True)
                if p.returncode != 0:
                    # the whole output stays (bench-out/), and the failures section is printed: the
                    # last lines alone are the warnings summary, which pushes the assertion out of view
                    keep = ROOT / "bench-out" / f"kvm_flake_run{i}.log"
                    keep.parent.mkdir(parents=True, exist_ok=True)
                    keep.write_text(p.stdout + p.stderr)
                    out = p.stdout
                    lo, hi = out.find("= FAILURES ="), out.find("warnings summary")
                    print(out[lo:hi] if 0 <= lo < hi else out[-4000:])
                    print(f"(the whole output of run {i}: {keep})")
    finally:
        if hogp is not None:
            hogp.kill()
    print(
        f"\nload average now {os.getloadavg()[0]:.1f}; hog on CPU {a.hog}"
        if a.hog is not None
        else f"\nload average now {os.getloadavg()[0]:.1f}; no hog"
    )
    ok = sum(1 for r in results if r[1] == 0)
    print(f"{ok} of {len(results)} runs passed")
    print("\nmeasurements per remeasure() call, over all runs (1 = first trusted; -N = skipped after N disturbed):")
    for name, counts in sorted(tries.items()):
        first = sum(1 for c in counts if c == 1)
        print(f"  {name}: {counts}  (first try trusted {first}/{len(counts)})")
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
