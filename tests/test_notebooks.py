"""Every notebook runs top to bottom in small mode (VCPULAB_SMALL=1) without an error."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VCPULAB_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors
    # every code cell ran
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code")


def test_the_notebooks_are_there() -> None:
    assert [p.stem for p in NOTEBOOKS] == [
        "01_real_kvm_tour",
        "02_ple_directed_yield",
        "03_pv_hints",
        "04_sched_maps",
        "05_halt_polling",
        "06_validation",
        "07_twins",
        "08_real_policies",
    ]
