"""The `vcpulab` command, run as a user would (subprocess), error paths included."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from vcpulab.kvm import Host
from vcpulab.testing import remeasure

ROOT = Path(__file__).resolve().parent.parent


def vcpulab(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vcpulab.cli", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("cmd", [[], ["info"], ["kvm", "steal"], ["sim"], ["watch"], ["demo"]])
def test_help_on_every_command(cmd: list[str]) -> None:
    r = vcpulab(*cmd, "--help")
    assert r.returncode == 0
    assert "usage: vcpulab" in r.stdout


def test_info_reports_capabilities_and_module_params(kvm_host: Host) -> None:
    r = vcpulab("info")
    assert r.returncode == 0, r.stderr
    assert "KVM_CAP_HALT_POLL" in r.stdout and "halt_poll_ns=" in r.stdout
    j = vcpulab("info", "--json")
    import json

    d = json.loads(j.stdout)
    assert d["api_version"] == 12 and "kvm" in d["module_params"]


def test_info_says_exactly_why_kvm_is_unavailable(tmp_path: Path) -> None:
    r = vcpulab("info", "--device", str(tmp_path / "kvm"))
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "does not exist" in lines[0] and "modprobe" in lines[0]


class _PrintedQuality:
    """The quality line the CLI printed, for vcpulab.testing.remeasure."""

    def __init__(self, out: str) -> None:
        lines = [ln.strip() for ln in out.splitlines()]
        self.text = next((ln for ln in lines if ln.startswith("quality:")), "quality: (no line printed)")
        self.disturbed = "DISTURBED" in self.text
        self.reasons = tuple(ln for ln in lines if ln.startswith(("other tasks", "threads alone")))

    def line(self) -> str:
        return self.text


def test_kvm_steal_prints_steal_per_vcpu(kvm_host: Host) -> None:
    def check(r: subprocess.CompletedProcess[str]) -> None:
        assert r.returncode == 0, r.stderr
        rows = [ln.split() for ln in r.stdout.splitlines()[1:] if ln.strip()[:1].isdigit() and "%" in ln]
        assert len(rows) == 2
        assert _PrintedQuality(r.stdout).text.startswith("quality: ")
        steal = [float(row[2].rstrip("%")) for row in rows]
        # each vCPU gets half of what other tasks leave of the CPU (50 % steal on a quiet CPU)
        m = re.search(r"other tasks ([\d.]+)%", r.stdout)
        assert m, r.stdout
        fair = 100 - (100 - float(m.group(1))) / 2
        assert all(abs(s - fair) <= 20 for s in steal), r.stdout

    remeasure(
        lambda: vcpulab("kvm", "steal", "--vcpus", "2", "--pcpus", "0", "--duration-s", "0.5"),
        check,
        quality=lambda r: _PrintedQuality(r.stdout),
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["kvm", "steal", "--vcpus", "0"], "positive integer"),
        (["kvm", "steal", "--duration-s", "abc"], "positive number"),
        (["kvm", "steal", "--pcpus", "999-999"], "may use only"),
        (["kvm", "steal", "--pcpus", "999"], "names CPU(s) [999]"),  # one CPU id, as pcpus=[999]
        (["kvm", "steal", "--pcpus", "0-99999"], "out of range"),
        (["bogus"], "invalid choice"),
        (["sim", "/nonexistent.toml"], "no such file"),
        (["watch", "0"], "positive integer"),
        (["watch", "999999999"], "no process 999999999"),
    ],
)
def test_bad_arguments_give_one_clear_line(args: list[str], message: str) -> None:
    r = vcpulab(*args)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], r.stderr


@pytest.mark.parametrize(
    "toml,message",
    [
        ("[config\nx=1", "invalid TOML"),
        ("[config]\nduration_ns = 'x'", "duration_ns"),
        ("[config.host]\npcpus = 0", "pcpus"),
        ("[[config.vms]]\npolicy = 'nope'", "unknown policy 'nope'"),
        ("[config]\n[grid]\n'host.nope' = [1]", "no field 'nope'"),
        ("[settings]\na = 1", "unknown section"),
    ],
)
def test_bad_toml_gives_one_clear_line(tmp_path: Path, toml: str, message: str) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(toml)
    r = vcpulab("sim", str(spec), "--out", str(tmp_path / "out"))
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_sim_run_writes_parquet_with_provenance_and_a_sched_map(tmp_path: Path) -> None:
    spec = tmp_path / "run.toml"
    spec.write_text(
        "[config]\nduration_ns = 2_000_000\nseed = 7\ntrace = true\n[config.host]\npcpus = 2\n"
        "[[config.vms]]\nvcpus = 2\ncount = 2\nworkload = 'ebizzy_like'\npolicy = 'dy_eligible'\n"
    )
    r = vcpulab("sim", str(spec), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    for name in ("summary", "vms", "vcpus", "pcpus", "trace"):
        assert (out / f"{name}.parquet").exists()
    assert (out / "sched_map.png").stat().st_size > 0
    meta = pl.read_parquet_metadata(out / "summary.parquet")
    assert '"seed":7' in meta["vcpulab.config"]
    assert meta["vcpulab.seed"] == "7"
    for key in (
        "vcpulab.vcpulab_version",
        "vcpulab.host_cpu_model",
        "vcpulab.kernel_release",
        "vcpulab.kvm_module_params",
    ):
        assert key in meta


def test_sim_out_keeps_earlier_outputs_until_a_run_succeeds(tmp_path: Path) -> None:
    # outputs are staged and swapped in only on success: a failing rerun (its
    # trace passes trace_max_rows, a SPEC that validates) leaves the earlier
    # run's files; a later good run without a trace removes the old trace,
    # and never a file that vcpulab did not write
    out = tmp_path / "out"
    traced = tmp_path / "traced.toml"
    traced.write_text("[config]\nduration_ns = 2_000_000\ntrace = true\n")
    plain = tmp_path / "plain.toml"
    plain.write_text("[config]\nduration_ns = 2_000_000\n")
    bad = tmp_path / "bad.toml"
    bad.write_text(
        "[config]\nduration_ns = 5_000_000_000\ntrace = true\n[config.host]\npcpus = 8\n"
        "[[config.vms]]\nvcpus = 20\ncount = 8\nworkload = 'ebizzy_like'\n"
    )
    assert vcpulab("sim", str(traced), "--out", str(out), "--quiet").returncode == 0
    first = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert {"summary.parquet", "trace.parquet", "sched_map.png"} <= set(first)
    (out / "notes.txt").write_text("mine")
    (out / "sched_map_0.png").write_text("another tool's file of a name vcpulab uses")
    r = vcpulab("sim", str(bad), "--out", str(out), "--quiet")
    assert r.returncode != 0 and "trace_max_rows" in r.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name in first} == first
    assert not [p for p in out.iterdir() if p.name.startswith(".vcpulab-staging")]
    assert vcpulab("sim", str(plain), "--out", str(out), "--quiet").returncode == 0
    names = {p.name for p in out.iterdir()}
    assert "summary.parquet" in names and "trace.parquet" not in names and "sched_map.png" not in names
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "sched_map_0.png").exists()


def test_sim_sweep_from_the_example_spec(tmp_path: Path) -> None:
    r = vcpulab("sim", str(ROOT / "examples" / "ple_policies.toml"), "--out", str(tmp_path), "--quiet")
    assert r.returncode == 0, r.stderr
    df = pl.read_parquet(tmp_path / "sweep.parquet")
    assert df["vms.0.policy"].to_list() == ["baseline_2011", "dy_eligible", "upstream", "oracle"]  # constructor names
    assert (df["throughput_ops_s"] > 0).all()
    assert len(list(tmp_path.glob("sched_map_*.png"))) == 4
    assert "vcpulab.grid" in pl.read_parquet_metadata(tmp_path / "sweep.parquet")


def test_demo_finishes_and_names_its_files(tmp_path: Path, kvm_host: Host) -> None:
    r = vcpulab("demo", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "wrote:" in r.stdout
    for name in ("kvm_steal_samples.parquet", "sched_map_8x20_ple.png", "sched_map_8x20_gang.png"):
        assert (tmp_path / name).exists()
        assert str(tmp_path / name) in r.stdout


def test_sim_called_in_process_leaves_no_figure_open(tmp_path: Path) -> None:
    # a notebook or script that calls the CLI's entry point must not collect
    # one open pyplot figure per sched map written
    import matplotlib.pyplot as plt

    from vcpulab import cli

    before = set(plt.get_fignums())
    assert cli.main(["sim", str(ROOT / "examples" / "ple_policies.toml"), "--out", str(tmp_path), "--quiet"]) == 0
    assert len(list(tmp_path.glob("sched_map_*.png"))) == 4
    assert set(plt.get_fignums()) == before
