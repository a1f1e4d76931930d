"""The `vcpulab` command, run as a user would (subprocess), error paths included."""

from __future__ import annotations

import json
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
    "args,error_type,message,code",
    [
        (["info", "--device", "/nonexistent/kvm"], "KvmUnavailableError", "/nonexistent/kvm does not exist", 1),
        (["kvm", "steal", "--pcpus", "999"], "ValueError", "--pcpus names CPU(s) [999]", 2),
        (["sim", "/nonexistent.toml"], "ValueError", "/nonexistent.toml: no such file", 2),
        (["watch", "999999999"], "ProcessLookupError", "no process 999999999", 1),
        (["watch", "--pid", "999999999"], "ProcessLookupError", "no process 999999999", 1),
        (["watch", "1", "--log", "/nonexistent/dir/w.csv"], "ValueError", "--log: the folder", 1),
        (["trace", "999999999"], "ProcessLookupError", "no process 999999999", 1),
    ],
)
def test_json_errors_are_one_object_with_the_plain_exit_status(
    args: list[str], error_type: str, message: str, code: int
) -> None:
    """Under --json a failure is {"error": {"type", "message"}} on stdout, with the
    status and stderr line of the plain command; without --json stdout stays empty."""
    plain = vcpulab(*args)
    assert plain.returncode == code and plain.stdout == "", plain
    assert message in plain.stderr
    r = vcpulab(*args, "--json")
    assert r.returncode == code, r
    doc = json.loads(r.stdout)
    assert list(doc) == ["error"] and doc["error"]["type"] == error_type, doc
    assert message in doc["error"]["message"], doc
    assert r.stderr == plain.stderr  # the human line stays on stderr


def test_json_usage_errors_stay_argparse_text() -> None:
    # documented: a usage error is found before --json is known to be set
    r = vcpulab("watch", "0", "--json")
    assert r.returncode == 2 and r.stdout == "" and "positive integer" in r.stderr


@pytest.mark.parametrize(
    "toml,message",
    [
        ("[config\nx=1", "invalid TOML"),
        ("[config]\nduration_ns = 'x'", "duration_ns"),
        ("[config.host]\nn_pcpus = 0", "pcpus"),
        ("[[config.vms]]\npolicy = 'nope'", "unknown policy 'nope'"),
        ("[config]\n[grid]\n'host.nope' = [1]", "no field 'nope'"),
        ("[settings]\na = 1", "unknown section"),
    ],
)
def test_bad_toml_gives_one_clear_line(tmp_path: Path, toml: str, message: str) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(toml)
    r = vcpulab("sim", str(spec), "--out", str(tmp_path / "out"))
    assert r.returncode == 2  # the SPEC is the argument: a usage error
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_sim_run_writes_parquet_with_provenance_and_a_sched_map(tmp_path: Path) -> None:
    spec = tmp_path / "run.toml"
    spec.write_text(
        "[config]\nduration_ns = 2_000_000\nseed = 7\ntrace = true\n[config.host]\nn_pcpus = 2\n"
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


def test_sim_draws_the_sched_map_of_the_output_window_and_refuses_a_bad_one_before_running(tmp_path: Path) -> None:
    import matplotlib.image

    from vcpulab import sim
    from vcpulab.cli import load_spec
    from vcpulab.cli._sim import _map_window

    run = "[config]\nduration_ns = 2_000_000\nseed = 7\ntrace = true\n[output]\nus_per_pixel = 1\n"
    whole, window = tmp_path / "whole.toml", tmp_path / "window.toml"
    whole.write_text(run)
    window.write_text(run + "start_ns = 1_000_000\nend_ns = 1_500_000\n")
    widths = []
    for spec in (whole, window):
        r = vcpulab("sim", str(spec), "--out", str(tmp_path / spec.stem), "--quiet")
        assert r.returncode == 0, r.stderr
        widths.append(matplotlib.image.imread(tmp_path / spec.stem / "sched_map.png").shape[1])
    # the same figure less the 1,500 columns (1 us each) outside the window
    assert widths[0] - widths[1] == 1500
    # a map without a trace is refused before the run (nothing printed of it)
    untraced = tmp_path / "untraced.toml"
    untraced.write_text("[config]\nduration_ns = 2_000_000\n[output]\nsched_map = true\n")
    r = vcpulab("sim", str(untraced), "--out", str(tmp_path / "untraced"))
    assert r.returncode == 1 and "sched_map needs config.trace = true" in r.stderr, r.stderr
    assert "throughput_ops_s" not in r.stdout
    cfg = sim.Config(duration_ns=2_000_000)
    assert _map_window(cfg, {}, 10.0, "the run") == (0, 2_000_000)
    with pytest.raises(ValueError, match="outside the run"):
        _map_window(cfg, {"end_ns": 3_000_000}, 10.0, "the run")
    with pytest.raises(ValueError, match=re.escape("us_per_pixel >= 0.01,")):
        _map_window(cfg, {}, 0.001, "the run")
    with pytest.raises(ValueError, match=re.escape("us_per_pixel >= 0.00251,")):
        _map_window(cfg, {"start_ns": 1_499_999}, 0.001, "the run")  # 501 ns: 0.002505 us a pixel
    for bad, message in (
        ("start_ns = -1", "start_ns must be an int of ns >= 0"),
        ("end_ns = 1.5", "end_ns must be an int of ns >= 0"),
        ("start_ns = 5\nend_ns = 5", "end_ns (5) must be after start_ns (5)"),
    ):
        window.write_text(run + bad + "\n")
        with pytest.raises(ValueError, match=re.escape(message)):
            load_spec(window)


def test_sim_json_names_the_spec_its_summary_and_its_files(tmp_path: Path) -> None:
    from vcpulab.cli import load_spec

    spec = tmp_path / "run.toml"
    spec.write_text("[config]\nduration_ns = 2_000_000\nseed = 3\ntrace = true\n")
    out = tmp_path / "out"
    r = vcpulab("sim", str(spec), "--out", str(out), "--json", "--perfetto")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # the whole of stdout is the one object
    assert doc["spec"] == str(spec) and doc["kind"] == "run" and doc["seed"] == 3
    assert doc["config_hash"] == load_spec(spec)[0].config_hash()
    summary = pl.read_parquet(out / "summary.parquet").row(0, named=True)
    assert doc["summary"] == summary and doc["summary"]["throughput_ops_s"] > 0
    names = {"summary", "vms", "vcpus", "pcpus", "trace"}
    assert doc["out"] == str(out)
    assert sorted(doc["files"]) == sorted(
        [str(out / f"{n}.parquet") for n in names] + [str(out / "sched_map.png"), str(out / "trace.perfetto.json")]
    )
    assert all(Path(f).is_file() for f in doc["files"])
    # the human output moved to stderr, as the plain run prints it on stdout
    plain = vcpulab("sim", str(spec), "--out", str(tmp_path / "plain"), "--perfetto")
    assert plain.returncode == 0 and "throughput_ops_s" in plain.stdout and "wrote:" in plain.stdout
    assert "throughput_ops_s" in r.stderr and "wrote:" in r.stderr and str(out / "summary.parquet") in r.stderr


def test_sim_out_keeps_earlier_outputs_until_a_run_succeeds(tmp_path: Path) -> None:
    # outputs are staged and swapped in only on success: a failing rerun (a
    # SPEC that validates, whose sched map of 5 s at 10 us a pixel would be
    # too wide: refused before the run) leaves the earlier run's files; a
    # later good run without a trace removes the old trace, and never a file
    # that vcpulab did not write
    out = tmp_path / "out"
    traced = tmp_path / "traced.toml"
    traced.write_text("[config]\nduration_ns = 2_000_000\ntrace = true\n")
    plain = tmp_path / "plain.toml"
    plain.write_text("[config]\nduration_ns = 2_000_000\n")
    bad = tmp_path / "bad.toml"
    bad.write_text(
        "[config]\nduration_ns = 5_000_000_000\ntrace = true\n[config.host]\nn_pcpus = 8\n"
        "[[config.vms]]\nvcpus = 20\ncount = 8\nworkload = 'ebizzy_like'\n"
    )
    assert vcpulab("sim", str(traced), "--out", str(out), "--quiet").returncode == 0
    first = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert {"summary.parquet", "trace.parquet", "sched_map.png"} <= set(first)
    (out / "notes.txt").write_text("mine")
    (out / "sched_map_0.png").write_text("another tool's file of a name vcpulab uses")
    r = vcpulab("sim", str(bad), "--out", str(out), "--quiet")
    assert r.returncode != 0 and "500000 columns" in r.stderr and "us_per_pixel >= 25" in r.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name in first} == first
    assert not [p for p in out.iterdir() if p.name.startswith(".vcpulab-staging")]
    assert vcpulab("sim", str(plain), "--out", str(out), "--quiet").returncode == 0
    names = {p.name for p in out.iterdir()}
    assert "summary.parquet" in names and "trace.parquet" not in names and "sched_map.png" not in names
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "sched_map_0.png").exists()


def test_sim_sweep_from_the_example_spec(tmp_path: Path) -> None:
    r = vcpulab("sim", str(ROOT / "examples" / "ple_policies.toml"), "--out", str(tmp_path), "--quiet", "--json")
    assert r.returncode == 0, r.stderr
    df = pl.read_parquet(tmp_path / "sweep.parquet")
    assert df["vms.0.policy"].to_list() == ["baseline_2011", "dy_eligible", "upstream", "oracle"]  # constructor names
    assert (df["throughput_ops_s"] > 0).all()
    maps = sorted(p.name for p in tmp_path.glob("sched_map_*.png"))
    assert maps == [f"sched_map_{i}_policy-{p}.png" for i, p in enumerate(df["vms.0.policy"])], maps
    doc = json.loads(r.stdout)
    assert doc["kind"] == "sweep" and doc["points"] == 4 and doc["failed_points"] == 0
    assert list(doc["grid"]) == ["vms.0.policy"] and "summary" not in doc
    assert [row["vms.0.policy"] for row in doc["rows"]] == df["vms.0.policy"].to_list()
    assert [row["throughput_ops_s"] for row in doc["rows"]] == df["throughput_ops_s"].to_list()
    assert [row["config_hash"] for row in doc["rows"]] == df["config_hash"].to_list()
    assert str(tmp_path / "sweep.parquet") in doc["files"] and len(doc["files"]) == 5
    assert "vcpulab.grid" in pl.read_parquet_metadata(tmp_path / "sweep.parquet")


def test_a_sweep_point_s_map_is_named_and_titled_by_its_grid_values() -> None:
    from vcpulab.cli._sim import _point_names

    assert _point_names(2, {"vms.0.policy": "oracle", "host.n_pcpus": 8}) == (
        "sched_map_2_policy-oracle_n_pcpus-8.png",
        "point 2: vms.0.policy = oracle, host.n_pcpus = 8",
    )
    assert _point_names(0, {"vms.0.workload": "a b/c"})[0] == "sched_map_0_workload-a-b-c.png"
    assert _point_names(3, {})[0] == "sched_map_3.png"


def test_demo_finishes_and_names_its_files(tmp_path: Path, kvm_host: Host) -> None:
    r = vcpulab("demo", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "wrote:" in r.stdout
    for name in ("kvm_steal_samples.parquet", "sched_map_8x20_ple.png", "sched_map_8x20_gang.png"):
        assert (tmp_path / name).exists()
        assert str(tmp_path / name) in r.stdout


class _StandInRun:
    """A real run whose quality is a stand-in: disturbed or clean, whatever the machine did."""

    class _Q:
        def __init__(self, disturbed: bool) -> None:
            self.disturbed = disturbed
            self.reasons = ("other tasks 70% of CPUs [1] (stand-in)",) if disturbed else ()

        def line(self) -> str:
            return "quality: DISTURBED (stand-in)" if self.disturbed else "quality: clean (stand-in)"

    def __init__(self, real: object, disturbed: bool) -> None:
        self._real = real
        self.quality = self._Q(disturbed)

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


def test_demo_measures_a_disturbed_halt_poll_run_again(
    tmp_path: Path, kvm_host: Host, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the first halt-polling run reads as disturbed: the demo runs it again and
    # prints the second; a run disturbed every time is said to be so (the
    # qualities are stand-ins, so what this machine's load does cannot change them)
    import vcpulab.experiment as ex
    from vcpulab import cli
    from vcpulab.cli import _demo

    real = ex.run
    polls: list[int] = []

    def run(w: object, **kw: object) -> object:
        r = real(w, **kw)  # type: ignore[arg-type]
        if isinstance(w, ex.MsiPingPong):
            polls.append(int(kw["halt_poll_ns"]))  # type: ignore[call-overload]
            return _StandInRun(r, disturbed=len(polls) == 1 or bool(kw["halt_poll_ns"]))
        return r

    monkeypatch.setattr(ex, "run", run)
    assert cli.main(["demo", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # poll 0: disturbed once, then clean; poll 200000: disturbed every time, DEMO_TRIES runs
    assert polls == [0, 0] + [200_000] * _demo.DEMO_TRIES
    assert out.count("disturbed by other tasks") == 1 + (_demo.DEMO_TRIES - 1)
    assert out.count(f"disturbed in all {_demo.DEMO_TRIES} runs") == 1
    assert "halt_poll_ns=     0: round trip median" in out
    assert "halt_poll_ns=200000: round trip median" in out


def test_sim_called_in_process_leaves_no_figure_open(tmp_path: Path) -> None:
    # a notebook or script that calls the CLI's entry point must not collect
    # one open pyplot figure per sched map written
    import matplotlib.pyplot as plt

    from vcpulab import cli

    before = set(plt.get_fignums())
    assert cli.main(["sim", str(ROOT / "examples" / "ple_policies.toml"), "--out", str(tmp_path), "--quiet"]) == 0
    assert len(list(tmp_path.glob("sched_map_*.png"))) == 4
    assert set(plt.get_fignums()) == before


@pytest.mark.parametrize(
    "cmdline,name",
    [
        (["qemu-system-x86_64", "-name", "guest=web1,debug-threads=on", "-m", "1G"], "web1"),
        (["qemu-system-x86_64", "-m", "1G", "-name", "web2"], "web2"),
        (["qemu-kvm", "-name", "db,process=qemu-db"], "db"),
        (["qemu-kvm", "-name", "process=x,guest=a,,b"], "a,b"),  # ,, is QEMU's escaped comma
        (["qemu-kvm", "-name", "process=x"], None),
        (["qemu-kvm", "-name"], None),
        (["firecracker", "--api-sock", "/tmp/fc.sock"], None),
    ],
)
def test_the_guest_name_of_a_qemu_command_line(cmdline: list[str], name: str | None) -> None:
    from vcpulab.cli._watch import _qemu_guest_name

    assert _qemu_guest_name(cmdline) == name


def test_watch_redraws_on_a_terminal_unless_json_or_told_not_to() -> None:
    import argparse

    from vcpulab.cli import build_parser
    from vcpulab.cli._watch import _redraws

    def ns(*flags: str) -> argparse.Namespace:
        return build_parser().parse_args(["watch", "1", *flags])

    assert _redraws(ns(), isatty=True) is True
    assert _redraws(ns(), isatty=False) is False
    assert _redraws(ns("--json"), isatty=True) is False
    assert _redraws(ns("--no-refresh"), isatty=True) is False
    assert _redraws(ns("--refresh"), isatty=False) is True
    assert _redraws(ns("--log", "x.csv"), isatty=True) is True  # a log is written beside the table
