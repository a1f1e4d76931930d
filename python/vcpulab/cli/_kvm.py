"""``vcpulab info`` and ``vcpulab kvm steal``: what KVM offers here, and a real overcommit run's steal per vCPU."""

from __future__ import annotations

import argparse
import json
from typing import Any

from vcpulab.cli._common import _Failed, _quality_line


def cmd_info(args: argparse.Namespace) -> int:
    from vcpulab.kvm import Host, KvmUnavailableError, module_params, virtualization

    try:
        host = Host(args.device)
    except KvmUnavailableError as e:
        raise _Failed(e, line=f"vcpulab: {e}") from e
    if args.json:
        print(
            json.dumps(
                {
                    "api_version": host.api_version,
                    "max_vcpus": host.max_vcpus,
                    "virtualization": virtualization(),
                    "capabilities": host.capabilities,
                    "pv_features": host.pv_features,
                    "module_params": module_params(),
                },
                indent=2,
                default=str,
            )
        )
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


def _steal_rows(run) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    import polars as pl

    f = run.steal_fraction().join(
        run.threads.select("vm", "vcpu", "run_delay_ns", "wall_ns", "cpus"), on=["vm", "vcpu"]
    )
    f = f.with_columns((pl.col("run_delay_ns") / pl.col("wall_ns")).alias("run_delay_fraction"))
    keep = ["vm", "vcpu", "cpus", "steal_fraction", "run_delay_fraction", "run_delay_ns", "wall_ns"]
    return [{k: r[k] for k in keep if k in r} for r in f.iter_rows(named=True)]


def _steal_table(run) -> str:  # type: ignore[no-untyped-def]
    lines = [f"{'vCPU':>5} {'host CPUs':>10} {'steal':>8} {'run delay':>10}"]
    for r in _steal_rows(run):
        lines.append(
            f"{r['vcpu']:>5} {','.join(map(str, r['cpus'])):>10} {r['steal_fraction']:>8.1%} {r['run_delay_fraction']:>10.1%}"
        )
    return "\n".join(lines)


def cmd_kvm_steal(args: argparse.Namespace) -> int:
    from vcpulab import _core
    from vcpulab.experiment import Spin, run

    allowed = sorted(_core.allowed_cpus())
    pcpus = args.pcpus if args.pcpus is not None else allowed[:1]
    bad = [c for c in pcpus if c not in allowed]
    if bad:
        raise _Failed(ValueError(f"--pcpus names CPU(s) {bad} but this process may use only CPUs {allowed}"), code=2)
    r = run(Spin(), vcpus=args.vcpus, pcpus=pcpus, duration_s=args.duration_s, sample_every_s=0.01, warn_quality=False)
    fair = 1 - min(1, len(pcpus) / args.vcpus)
    if args.json:
        rows = _steal_rows(r)
        print(
            json.dumps(
                {
                    "vcpus": args.vcpus,
                    "pcpus": pcpus,
                    "wall_s": r.wall_s,
                    "fair_share_steal_fraction": fair,
                    "per_vcpu": rows,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"{args.vcpus} vCPUs on host CPU(s) {','.join(map(str, pcpus))} for {r.wall_s:.2f} s "
        f"(fair share: {fair:.0%} steal)"
    )
    print(_steal_table(r))
    print(_quality_line(r))
    return 0
