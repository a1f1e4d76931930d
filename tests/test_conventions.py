"""The conventions docs/conventions.md states, checked: figures show in notebooks, the
package's submodules import without cycles, one dtype per key column, one
label per policy, one meaning of --pcpus, time categories from the engine,
provenance that says where a result came from."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import polars as pl
import pytest

import vcpulab
from vcpulab import _core

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "python" / "vcpulab"


def _py(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- figures


def test_the_library_never_selects_a_matplotlib_backend() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in PKG.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"matplotlib\.use\(|\buse\(\s*['\"]Agg", line)
    ]
    assert offenders == []
    # and drawing does not switch it: a later figure still goes to the user's backend
    r = _py(
        "import matplotlib; matplotlib.use('svg'); from vcpulab import sim, plot, calibrate\n"
        "r = sim.run(sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=2),), duration_ns=1_000_000, trace=True))\n"
        "plot.sched_map(r); plot.time_breakdown(r)\n"
        "print(matplotlib.get_backend())"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "svg"


def test_sched_map_is_a_figure_with_a_time_axis_and_every_host_cpu() -> None:
    from matplotlib.figure import Figure

    from vcpulab import plot, sim

    # 6 host CPUs, one 2-vCPU VM: four CPUs never run a vCPU, and still get a row
    cfg = sim.Config(host=sim.Host(n_pcpus=6), vms=(sim.Vm(vcpus=2),), duration_ns=2_000_000, trace=True)
    r = sim.run(cfg)
    assert r.trace is not None and int(r.trace["pcpu"].max()) < 5
    sm = plot.sched_map(r, us_per_pixel=10)
    assert isinstance(sm, Figure) and len(sm.axes) == 1
    ax = sm.axes[0]
    assert "time (ms)" in ax.get_xlabel()
    assert ax.get_xlim() == pytest.approx((0.0, 2.0))
    # every host CPU, the whole run; 8 px per CPU, since a map of few CPUs fills plot.MIN_MAP_PX (48 px)
    assert sm.image.shape == (6 * 8, 200, 3) and plot.MIN_MAP_PX == 48
    assert (sm.image[8 * 2 :] == 255).all()  # CPUs 2-5 idle: white
    assert plot.sched_map(r, us_per_pixel=10, row_px=4).image.shape == (6 * 4, 200, 3)
    png = sm._repr_png_()
    assert png.startswith(b"\x89PNG")
    compact = plot.sched_map(r, us_per_pixel=10, compact=True)
    assert compact.image.shape == (6, 200, 3) and not compact.legends


@pytest.mark.slow
def test_figures_display_exactly_once_in_jupyter(tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from vcpulab import sim, plot\n"
            "r = sim.run(sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=2, count=2),), duration_ns=1_000_000, trace=True))"
        ),
        nbformat.v4.new_code_cell("plot.sched_map(r)"),  # as a statement: shown once, as a picture
        nbformat.v4.new_code_cell("plot.time_breakdown(r)\nx = 1"),  # mid-cell: shown by the backend
        nbformat.v4.new_code_cell("import matplotlib; matplotlib.get_backend()"),
    ]
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outs = [c.outputs for c in nb.cells]
    for cell in outs[1:3]:
        pictures = [o for o in cell if "image/png" in o.get("data", {})]
        assert len(pictures) == 1, cell
    assert "inline" in outs[3][0]["data"]["text/plain"]


# ---------------------------------------------------------------- package layout


def test_submodules_are_reachable_from_the_package_and_load_lazily() -> None:
    r = _py(
        "import sys, vcpulab\n"
        "assert 'vcpulab.sim' not in sys.modules and 'matplotlib' not in sys.modules\n"
        "print(vcpulab.sim.run.__module__, vcpulab.plot.__name__, vcpulab.provenance.__name__)"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["vcpulab.sim", "vcpulab.plot", "vcpulab.provenance"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        vcpulab.nope  # noqa: B018


@pytest.mark.parametrize(
    "module",
    [
        "vcpulab.sim._distributed",
        "vcpulab.sim.distributed",
        "vcpulab.sim._points",
        "vcpulab.provenance",
        "vcpulab.plot",
        "vcpulab.analysis",
        "vcpulab.experiment",
        "vcpulab.calibrate",
        "vcpulab.cli",
    ],
)
def test_each_module_imports_first_in_a_fresh_process(module: str) -> None:
    r = _py(f"import {module}")
    assert r.returncode == 0, r.stderr


def test_a_missing_numpy_is_an_import_error_naming_it_not_a_panic_of_the_core() -> None:
    # the core's numpy bindings would panic across the FFI (pyo3's PanicException) if _core loaded first
    r = _py(
        "import sys; sys.modules['numpy'] = None\n"
        "try:\n    import vcpulab\n"
        "except BaseException as e:\n    print(type(e).__name__, isinstance(e, ImportError), 'numpy' in str(e))\n"
    )
    assert r.stdout.split() == ["ModuleNotFoundError", "True", "True"], (r.stdout, r.stderr)
    assert "panicked" not in r.stderr


def test_the_simulator_does_not_import_the_experiment_layer() -> None:
    r = _py("import sys; from vcpulab import sim; sim.Result.provenance; print('vcpulab.experiment' in sys.modules)")
    assert r.stdout.strip() == "False", r.stderr


def test_the_kvm_layer_imports_without_polars() -> None:
    # polars (~130 ms here) is imported where a frame is made (attach, sample,
    # Vm.stats_frame...), not by `import vcpulab.kvm`: 240 ms -> 100 ms here
    r = _py("import sys; import vcpulab.kvm; print('polars' in sys.modules)")
    assert r.stdout.strip() == "False", r.stderr


def test_the_checkpointed_sweep_api_is_public(tmp_path: Path) -> None:
    from vcpulab import sim
    from vcpulab.sim import distributed

    assert sim.run_sweep is distributed.run_sweep and sim.read_dataset is distributed.read_dataset
    base = sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=2),), duration_ns=1_000_000)
    df = distributed.run_sweep(base, {"seed": [0, 1]}, out=tmp_path / "ds", progress=False)
    back = distributed.read_dataset(tmp_path / "ds")
    assert df.height == back.height == 2 and set(distributed.EXTRA_COLUMNS) <= set(back.columns)


# ---------------------------------------------------------------- names and dtypes


def test_a_policy_is_labelled_with_its_constructor_name() -> None:
    from vcpulab.sim import policies as P

    for name in P.NAMES:
        assert P.label(getattr(P, name)()) == name
        assert P.by_name(name) == getattr(P, name)()
    assert P.label(P.python(lambda s, c: None, name="mine")) == "python:mine"
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        P.by_name("nope")


def test_a_name_works_wherever_a_policy_or_workload_does() -> None:
    from vcpulab import sim
    from vcpulab.sim import policies as P
    from vcpulab.sim import presets

    assert sim.Vm(policy="dy_eligible") == sim.Vm(policy=P.dy_eligible())
    assert sim.Vm(workload="ebizzy_like").workload == presets.ebizzy_like()
    for name in P.NAMES:
        assert P.label(sim.Vm(policy=name).policy) == name
    with pytest.raises(ValueError, match="unknown policy 'nope'; choose one of upstream"):
        sim.Vm(policy="nope")
    with pytest.raises(ValueError, match="unknown workload 'nope'"):
        sim.Vm(workload="nope")


def test_policy_and_workload_names_work_in_a_python_grid() -> None:
    from vcpulab import sim
    from vcpulab.sim import policies as P
    from vcpulab.sim import presets

    base = sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=4),), duration_ns=2_000_000)
    grid = {"vms.0.policy": ["baseline_2011", P.no_yield()], "vms.0.workload": ["ebizzy_like"]}
    points = sim.expand(base, grid)
    assert [p["vms.0.policy"] for p, _ in points] == ["baseline_2011", "no_yield"]
    assert points[0][1].vms[0].policy == P.baseline_2011()
    assert points[0][1].vms[0].workload == presets.ebizzy_like()
    df = sim.sweep(base, grid, progress=False)
    assert df["vms.0.policy"].to_list() == ["baseline_2011", "no_yield"]
    with pytest.raises(ValueError, match="unknown policy 'bogus'"):
        sim.sweep(base, {"vms.0.policy": ["bogus"]}, progress=False)


def test_key_columns_are_int64_in_every_simulator_frame() -> None:
    # ... but the trace's, whose rows number in millions: Int32
    # (vcpulab._frames.TRACE_KEY_DTYPE), which polars joins with Int64 keys
    from vcpulab import sim
    from vcpulab._frames import TRACE_KEY_DTYPE

    r = sim.run(
        sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=2, count=2),), duration_ns=1_000_000, trace=True)
    )
    for name in ("vms", "vcpus", "pcpus", "trace"):
        df = getattr(r, name)
        want = TRACE_KEY_DTYPE if name == "trace" else pl.Int64
        keys = {c: df.schema[c] for c in ("vm", "vcpu", "pcpu", "last_pcpu") if c in df.columns}
        assert keys and all(t == want for t in keys.values()), (name, keys)
    assert r.trace is not None and r.trace.join(r.vcpus, on=["vm", "vcpu"]).height == r.trace["vcpu"].ge(0).sum()


@pytest.mark.filterwarnings("ignore::vcpulab.quality.QualityWarning")  # the frames' dtypes, whatever else ran
def test_key_columns_are_int64_in_every_real_run_frame(kvm_host) -> None:  # type: ignore[no-untyped-def]
    from vcpulab.experiment import Spin, run
    from vcpulab.kvm import sample_stats

    r = run(Spin(), vcpus=2, pcpus=[0], duration_s=0.1, sample_every_s=0.02)
    for df in (r.samples, r.threads, r.results, r.deltas(), r.steal_fraction()):
        assert df.schema["vm"] == pl.Int64 and df.schema["vcpu"] == pl.Int64, df.schema
    with kvm_host.create_vm(memory_mib=16) as vm:
        assert sample_stats([vm.create_vcpu(0)]).schema["vcpu"] == pl.Int64


# ---------------------------------------------------------------- one source of truth


def test_time_categories_come_from_the_engine_and_cover_the_run() -> None:
    from vcpulab import analysis, plot, sim

    assert sim.TIME_CATEGORIES == tuple(_core.SIM_VCPU_TIME_CATEGORIES)
    assert plot.TIME_CATEGORIES == sim.TIME_CATEGORIES
    assert "polling_ns" in sim.TIME_CATEGORIES
    # halt polling on, a guest that computes 20 µs and sleeps 50 µs: the host polls through every
    # sleep; the categories add up to each vCPU's whole run and "useful" is the true ~29 %, not the
    # ~93 % a list without polling_ns gave
    sleepy = sim.Workload(phases=(sim.Compute(ns=20_000), sim.Sleep(ns=50_000)), name="sleepy")
    hp = sim.HaltPoll(policy="fixed", max_ns=200_000)
    cfg = sim.Config(
        host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=2, workload=sleepy, halt_poll=hp),), duration_ns=5_000_000
    )
    r = sim.run(cfg)
    total = sum(r.vcpus[c].cast(pl.Int64) for c in sim.TIME_CATEGORIES)
    assert (total == int(r.summary["duration_ns"][0])).all()
    tb = analysis.time_breakdown(r, by="vm")
    frac = dict(zip(tb["category"], tb["fraction"]))
    assert set(frac) == {c.removesuffix("_ns") for c in sim.TIME_CATEGORIES}
    assert frac["polling"] > 0.5 and 0.2 < frac["useful"] < 0.4, frac
    assert sum(frac.values()) == pytest.approx(1.0)


def test_pcpu_time_categories_cover_each_host_cpu() -> None:
    from vcpulab import sim

    r = sim.run(sim.Config(host=sim.Host(n_pcpus=3), vms=(sim.Vm(vcpus=2),), duration_ns=2_000_000))
    total = sum(r.pcpus[c].cast(pl.Int64) for c in sim.PCPU_TIME_CATEGORIES)
    assert (total == int(r.summary["duration_ns"][0])).all()


# ---------------------------------------------------------------- CLI and provenance


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vcpulab.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_version_names_the_build_and_the_dependencies() -> None:
    from vcpulab import provenance

    r = _cli("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"vcpulab {provenance.version()} (python ")
    assert provenance.version().startswith(vcpulab.__version__ + "+")
    assert re.fullmatch(r"[0-9a-f]{12}(\.dirty)?|unknown|.+", provenance.BUILD_ID)
    assert "polars" in r.stdout and "numpy" in r.stdout


def test_provenance_has_versions_timestamp_and_command_line() -> None:
    from vcpulab import provenance, sim

    p = sim.run(sim.Config(duration_ns=1_000_000)).provenance
    for key in (
        "vcpulab_version",
        "dependencies",
        "timestamp_utc",
        "command_line",
        "host_cpu_model",
        "kernel_release",
        "seed",
        "config_hash",
    ):
        assert key in p, key
    assert p["vcpulab_version"] == provenance.version()
    assert p["dependencies"]["polars"] == pl.__version__
    assert p["timestamp_utc"].endswith("+00:00")
    assert p["command_line"] == sys.argv


def test_cpu_lists_mean_the_same_on_the_command_line_as_in_python() -> None:
    import argparse

    from vcpulab.cli import parse_cpu_list

    assert parse_cpu_list("0") == [0]
    assert parse_cpu_list("0,2") == [0, 2]
    assert parse_cpu_list("0-3,6") == [0, 1, 2, 3, 6]
    assert parse_cpu_list("3-3") == [3]
    for bad in ("a", "1-", "3-1", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_cpu_list(bad)
    # a bare number is the one CPU it names, as pcpus=[N] (it was a count before 2026-12-01)
    assert parse_cpu_list("1") == [1] and parse_cpu_list(" 7 ") == [7]
    with pytest.raises(argparse.ArgumentTypeError, match="out of range"):
        parse_cpu_list("0-4000000000")  # refused before a list of 4e9 ids is built
    r = _cli("kvm", "steal", "--pcpus", "4000", "--duration-s", "0.1")
    assert r.returncode == 2 and "names CPU(s) [4000]" in r.stderr, r.stderr


def test_kvm_steal_json(kvm_host) -> None:  # type: ignore[no-untyped-def]
    r = _cli("kvm", "steal", "--vcpus", "2", "--pcpus", "0", "--duration-s", "0.3", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["pcpus"] == [0] and d["vcpus"] == 2 and d["fair_share_steal_fraction"] == 0.5
    assert [row["vcpu"] for row in d["per_vcpu"]] == [0, 1]
    assert all(0 <= row["steal_fraction"] <= 1 for row in d["per_vcpu"])


def test_sweep_parquet_stores_the_grid_as_json(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        "[config]\nduration_ns = 1_000_000\n[config.host]\nn_pcpus = 2\n[[config.vms]]\nvcpus = 4\n"
        "[grid]\n'vms.0.policy' = ['baseline_2011', 'dy_eligible']\nseed = [0]\n"
    )
    r = _cli("sim", str(spec), "--out", str(tmp_path / "out"), "--quiet")
    assert r.returncode == 0, r.stderr
    meta = pl.read_parquet_metadata(tmp_path / "out" / "sweep.parquet")
    grid = json.loads(meta["vcpulab.grid"])
    assert grid["seed"] == [0]
    assert [p["label"] for p in grid["vms.0.policy"]] == ["baseline_2011", "dy_eligible"]
    assert grid["vms.0.policy"][0]["kind"] == "baseline_2011"
    assert json.loads(meta["vcpulab.dependencies"])["polars"] == pl.__version__
    assert "timestamp_utc" in {k.removeprefix("vcpulab.") for k in meta}
    df = pl.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert df["vms.0.policy"].to_list() == ["baseline_2011", "dy_eligible"]


@pytest.mark.slow
def test_the_common_sweep_call_type_checks(tmp_path: Path) -> None:
    mypy_api = pytest.importorskip("mypy.api")
    src = tmp_path / "user.py"
    src.write_text(
        "import polars as pl\nfrom vcpulab import sim\n"
        "base = sim.Config()\n"
        "df: pl.DataFrame = sim.sweep(base, {'seed': [0, 1]})\n"
        "df.filter(pl.col('seed') == 0)\n"
        "df2, results = sim.sweep(base, {'seed': [0]}, results=True)\n"
        "r: sim.Result = results[0]\n"
        "n: int = sim.sweep(base, {'vms.0.policy': ['no_yield', 'dy_eligible']}).height\n"
        "def either(flag: bool) -> None:\n"
        "    print(sim.sweep(base, {'seed': [0]}, results=flag))\n"
        "vm = sim.Vm(policy='dy_eligible', workload='ebizzy_like')\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, err, status = mypy_api.run(
            [str(src), "--follow-imports=silent", "--ignore-missing-imports", "--cache-dir", str(ROOT / ".mypy_cache")]
        )
    assert status == 0, out + err


# ---------------------------------------------------------------- registries read from Rust


def test_python_tables_are_read_from_the_rust_registries() -> None:
    from vcpulab import kvm

    assert list(kvm.PROGRAMS) == [n for n, _, _ in _core.GUEST_PROGRAMS] and len(kvm.PROGRAMS) >= 19
    assert set(kvm.PROGRAM_PARAMS) == set(kvm.PROGRAMS)
    assert kvm.EXIT_KINDS[:3] == ("io", "mmio", "hlt") and "interrupted" in kvm.EXIT_KINDS
    assert kvm._PV_BITS["STEAL_TIME"] == 5 and kvm._PV_BITS["PV_SCHED_YIELD"] == 13
    assert kvm._DISABLE_EXIT_BITS == {"mwait": 1, "hlt": 2, "pause": 4, "cstate": 8}


# a valid value for every parameter name a built-in program takes
_PARAM_VALUES = {
    "port": 0x10,
    "value": 1,
    "size": 1,
    "addr": 0xD000_0000,
    "iterations": 1,
    "count": 1,
    "vector": 0x40,
    "actual": 1,
    "expected": 1,
    "kind": "tas",
    "pv_exits": 1,
    "hold": 1,
    "think": 1,
    "vcpus": 1,
    "check_every": 1,
    "kick_vector": 0xF0,
    "rounds": 1,
    "gap_cycles": 1,
    "vector_base": 0x40,
    "hz": 100,
    "ticks": 1,
    "rule": "pcpu_is_idle",
    "work": 1,
    "poll": 1,
}


def test_every_registered_program_builds(kvm_host) -> None:  # type: ignore[no-untyped-def]
    from vcpulab import kvm

    with kvm_host.create_vm(memory_mib=16) as vm:
        for name, params in kvm.PROGRAM_PARAMS.items():
            kw = {p: _PARAM_VALUES[p] for p in params}
            if name == "exception":
                kw["vector"] = 3
            if name == "wake_placement":
                kw["vcpus"] = 2  # a waker and a worker
            prog = vm.load(name, **kw)
            assert prog is not None, name
        with pytest.raises(ValueError, match='unknown guest program "nope"; choose one of io_out, io_in'):
            vm.load("nope")


# ---------------------------------------------------------------- self-contained docs

_TEXT_SUFFIXES = (".py", ".rs", ".md", ".ipynb", ".toml")
# files exempt from the check (none: every file cites docs/sources.md)
_PENDING: set[str] = set()


def _project_texts() -> dict[str, str]:
    out = {}
    for base in ("python", "src", "docs", "notebooks", "tests", "benches", "examples"):
        for p in (ROOT / base).rglob("*"):
            if p.suffix in _TEXT_SUFFIXES and p.is_file() and "__pycache__" not in p.parts:
                out[str(p.relative_to(ROOT))] = p.read_text(errors="replace")
    for name in ("README.md", "ARCHITECTURE.md"):
        out[name] = (ROOT / name).read_text()
    return out


def test_no_reference_to_documents_users_do_not_have() -> None:
    pattern = re.compile(r"\bdigest\b(?!\(\))|spec §|kvm-mechanisms\.md|kvm-on-this-host\.md|seeds-digest")
    bad = []
    for path, text in _project_texts().items():
        if path in _PENDING or path == "tests/test_conventions.py":
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if pattern.search(line.replace("hexdigest", "")):
                bad.append(f"{path}:{i}: {line.strip()[:100]}")
    assert bad == [], "cite docs/sources.md instead:\n" + "\n".join(bad)


def test_every_source_tag_is_listed_in_docs_sources() -> None:
    sources = (ROOT / "docs" / "sources.md").read_text()
    listed = set(re.findall(r"\*\*\[([SK]\d+)\]", sources))
    assert {f"S{i}" for i in range(1, 6)} <= listed and {f"K{i}" for i in range(1, 8)} <= listed
    used = {}
    for path, text in _project_texts().items():
        for tag in re.findall(r"\[([SK]\d+)\]", text):
            used.setdefault(tag, path)
    missing = {t: p for t, p in used.items() if t not in listed}
    assert missing == {}, f"tags used but not in docs/sources.md: {missing}"
    # every source has a title, a date and a public URL
    for block in re.split(r"\n(?=\*\*\[[SK]\d+\])", sources)[1:]:
        assert "https://" in block, block[:80]


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.match(r"\d+(\.\d+)*", v).group(0).split("."))  # type: ignore[union-attr]


def test_the_version_is_one_number_and_the_changelog_has_it() -> None:
    """pyproject.toml and Cargo.toml carry the same version, and CHANGELOG.md
    has a section for it (a release that moves the version says what moved)."""
    py = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    rs = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M)
    assert py and rs and py.group(1) == rs.group(1), (py, rs)
    assert re.search(rf"^## {re.escape(py.group(1))} ", (ROOT / "CHANGELOG.md").read_text(), re.M)


def test_no_renamed_name_outlives_its_removal_release() -> None:
    """Every row of docs/conventions.md's renamed names says the release that
    removes the old name; a version at or past it must have removed it (and
    its row)."""
    current = _version(re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1))  # type: ignore[union-attr]
    text = (ROOT / "docs" / "conventions.md").read_text()
    table = text[text.index("| old | new | since | removed in | why |") :].split("\n\n")[0].splitlines()[2:]
    assert len(table) >= 1
    for row in table:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 5, row
        removal = _version(cells[3])
        assert removal > current, f"{cells[0]} was due for removal in {cells[3]}; this is {current}: remove it"
