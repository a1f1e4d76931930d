"""The ``vcpulab`` command.

    vcpulab info                         what KVM offers on this host (or exactly why it is unusable)
    vcpulab kvm steal --vcpus 4 --pcpus 1 --seconds 2
                                         a real overcommit run printing steal per vCPU
    vcpulab demo [--out DIR]             a short showcase; writes Parquet files and pictures

Every command takes ``--help``. Bad arguments give one clear line on stderr and
exit status 2; a failure of the run itself exits with 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, exit 2
        print(f"vcpulab: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {s!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {s!r}")
    return v


def cmd_info(args: argparse.Namespace) -> int:
    from vcpulab.kvm import Host, KvmUnavailableError, module_params, virtualization

    try:
        host = Host()
    except KvmUnavailableError as e:
        print(f"KVM unavailable: {e}")
        return 1
    if args.json:
        print(json.dumps({
            "api_version": host.api_version, "max_vcpus": host.max_vcpus, "virtualization": virtualization(),
            "capabilities": host.capabilities, "pv_features": host.pv_features, "module_params": module_params(),
        }, indent=2, default=str))  # fmt: skip
        return 0
    print(f"/dev/kvm: API version {host.api_version}, max vCPUs {host.max_vcpus}, virtualization {virtualization()}")
    print("capabilities:")
    for name, value in host.capabilities.items():
        print(f"  {name:<30} {value}")
    print(f"  exits that can be disabled:    {', '.join(sorted(host.disable_exits_allowed)) or 'none'}")
    pv = host.pv_features
    print("KVM PV features (CPUID 0x40000001):", ", ".join(n for n, on in pv.items() if on))
    print("module parameters:")
    for mod, params in module_params().items():
        print(f"  {mod}: " + ", ".join(f"{k}={v}" for k, v in params.items()))
    if not any(m in module_params() for m in ("kvm_intel", "kvm_amd")):
        print("  (no kvm_intel/kvm_amd: no pause-loop-exit parameters on this host)")
    return 0


def _steal_table(run) -> str:  # type: ignore[no-untyped-def]
    import polars as pl

    f = run.steal_fraction().join(run.threads.select("vm", "vcpu", "run_delay_ns", "wall_ns", "cpus"), on=["vm", "vcpu"])
    f = f.with_columns((pl.col("run_delay_ns") / pl.col("wall_ns")).alias("run_delay_fraction"))
    lines = [f"{'vCPU':>5} {'host CPUs':>10} {'steal':>8} {'run delay':>10}"]
    for r in f.iter_rows(named=True):
        lines.append(f"{r['vcpu']:>5} {','.join(map(str, r['cpus'])):>10} {r['steal_fraction']:>8.1%} {r['run_delay_fraction']:>10.1%}")
    return "\n".join(lines)


def cmd_kvm_steal(args: argparse.Namespace) -> int:
    from vcpulab import _core
    from vcpulab.experiment import Spin, run

    cpus = sorted(_core.allowed_cpus())
    if args.pcpus > len(cpus):
        print(f"vcpulab: error: --pcpus {args.pcpus} but this process may use only {len(cpus)} CPUs {cpus}", file=sys.stderr)
        return 2
    r = run(Spin(), vcpus=args.vcpus, pcpus=cpus[: args.pcpus], duration=args.seconds, sample_every=0.01)
    print(f"{args.vcpus} vCPUs on {args.pcpus} host CPU(s) for {r.wall_s:.2f} s "
          f"(fair share: {1 - min(1, args.pcpus / args.vcpus):.0%} steal)")  # fmt: skip
    print(_steal_table(r))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    written: list[Path] = []
    from vcpulab.kvm import KvmUnavailableError

    try:
        from vcpulab.experiment import MsiPingPong, Spin, run

        print("== real KVM: 4 vCPUs sharing 1 host CPU for 1 s")
        r = run(Spin(), vcpus=4, pcpus=[0], duration=1.0, sample_every=0.01)
        print(_steal_table(r))
        r.samples.write_parquet(out / "kvm_steal_samples.parquet")
        written.append(out / "kvm_steal_samples.parquet")
        print("\n== real KVM: halt polling, host -> vCPU messages 50 us after each halt")
        for poll in (0, 200_000):
            pp = run(MsiPingPong(rounds=500, gap_us=50), vcpus=1, duration=10, halt_poll_ns=poll)
            res = pp.results.row(0, named=True)
            last = pp.samples.filter(pp.samples["t_ns"] == pp.samples["t_ns"].max()).row(0, named=True)
            print(f"  halt_poll_ns={poll:>6}: round trip median {res['rtt_median_us']:.1f} us, "
                  f"successful polls {last['halt_successful_poll']} of {last['halt_exits']} halts")  # fmt: skip
    except KvmUnavailableError as e:
        print(f"(skipping the real-KVM part: {e})")
    print(f"\ndone in {time.monotonic() - t0:.1f} s; wrote:")
    for p in written:
        print(f"  {p}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vcpulab", description="Research workbench for overcommitted virtual CPUs.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    info = sub.add_parser("info", help="KVM capabilities and module parameters of this host")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.set_defaults(func=cmd_info)
    kvm = sub.add_parser("kvm", help="experiments on the real /dev/kvm")
    ksub = kvm.add_subparsers(dest="kvm_command", required=True, parser_class=_Parser)
    steal = ksub.add_parser("steal", help="a real overcommit run printing steal time per vCPU")
    steal.add_argument("--vcpus", type=_positive_int, default=4, help="vCPUs (each on its own thread; default 4)")
    steal.add_argument("--pcpus", type=_positive_int, default=1, help="host CPUs they share (default 1)")
    steal.add_argument("--seconds", type=_positive_float, default=2.0, help="duration (default 2)")
    steal.set_defaults(func=cmd_kvm_steal)
    demo = sub.add_parser("demo", help="a short showcase of real KVM and the simulator")
    demo.add_argument("--out", default="vcpulab-demo", help="output folder (default ./vcpulab-demo)")
    demo.set_defaults(func=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError) as e:
        print(f"vcpulab: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
