"""``python -m vcpulab.validation [--quick] [--seeds N] [--scale X] [--case NAME ...]``:
runs the registry and prints the table and the summary line."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any


def main(argv: Sequence[str] | None = None) -> int:
    from vcpulab.validation import quick_kwargs, to_markdown, validate

    ap = argparse.ArgumentParser(prog="python -m vcpulab.validation", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="the reduced run CI uses (3 seeds, a fifth of the lengths)")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per case (default 5; --quick: 3)")
    ap.add_argument("--scale", type=float, default=None, help="duration scale (default 1.0; --quick: 0.2)")
    ap.add_argument("--case", action="append", default=None, help="run only this case (repeatable)")
    ap.add_argument("--no-probes", action="store_true", help="skip the robustness probes (lock-step, starvation, ...)")
    args = ap.parse_args(argv)
    kw: dict[str, Any] = quick_kwargs() if args.quick else {"seeds": 5, "duration_scale": 1.0}
    if args.seeds is not None:
        kw["seeds"] = args.seeds
    if args.scale is not None:
        kw["duration_scale"] = args.scale
    t0 = time.monotonic()
    try:
        df = validate(args.case, **kw)
    except ValueError as e:
        print(f"vcpulab.validation: error: {e}", file=sys.stderr)
        return 2
    print(to_markdown(df))
    if not args.no_probes and not args.case:
        from vcpulab.validation import probes

        pr = probes.robustness(seeds=min(int(kw["seeds"]), 2), duration_scale=float(kw["duration_scale"]))
        print()
        print(probes.to_markdown(pr))
        print(probes.summary_line(pr))
    print(f"({kw['seeds']} seeds, duration scale {kw['duration_scale']}, {time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
