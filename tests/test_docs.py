"""The documentation a researcher reads: the API reference is complete, its
cross-references resolve, and no literal Sphinx role, issue number or
private import reaches it.

The reference (docs/api/, mkdocs + mkdocstrings) is built from the
docstrings. A Sphinx role (``:func:`run```) shows there as literal text: the
docstrings use mkdocstrings cross-references (``[`run`][vcpulab.experiment.run]``
or ``[`vcpulab.experiment.run`][]``), which ``mkdocs build --strict`` refuses
when they do not resolve. CI runs the strict build too (.ci/run).
"""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path
from typing import TypeVar

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "python" / "vcpulab"
ROLE = re.compile(r":(?:func|class|data|meth|mod|attr|exc|obj|const|py:\w+):`")
#: an issue number ("issue 12", "issue #12", "#12"); a bug number of a cited public source (7 digits) is not one
ISSUE = re.compile(r"\bissues? #?\d+\b|(?<![\w&/#-])#\d{1,3}\b", re.IGNORECASE)
PRIVATE_IMPORT = re.compile(
    r"\b(?:from|import)\s+vcpulab\._|\bfrom\s+vcpulab(?:\.\w+)*\s+import\s+(?:\([^)]*)?\b_\w|vcpulab\._core\b"
)
#: public modules whose public functions are not all API: the CLI's commands run through main(), the plugin's
#: hooks are pytest's
NOT_ALL_API = {"vcpulab.cli", "vcpulab.pytest_plugin"}


def _public_modules() -> list[str]:
    out = []
    for f in sorted(PKG.rglob("*.py")):
        parts = f.relative_to(PKG.parent).with_suffix("").parts
        if any(p.startswith("_") and p != "__init__" for p in parts):
            continue
        out.append(".".join(p for p in parts if p != "__init__"))
    return out


def _docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring of a module and of every ``#:`` comment (a docstring in the reference)."""
    text = path.read_text()
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    out.append((body[0].lineno, body[0].value.value))
        # attribute docstrings: a string right after an assignment
        body = getattr(node, "body", None)
        for i, stmt in enumerate(body[:-1] if isinstance(body, list) else []):
            nxt = body[i + 1]
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(nxt, ast.Expr):
                if isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                    out.append((nxt.lineno, nxt.value.value))
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#:"):
            out.append((i, line))
    return out


def _python_files() -> list[Path]:
    return sorted(p for p in PKG.rglob("*") if p.suffix in (".py", ".pyi"))


def _user_docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_no_literal_sphinx_role_in_a_docstring_or_the_docs() -> None:
    bad = []
    for f in _python_files():
        for line, text in _docstrings(f):
            for m in ROLE.finditer(text):
                bad.append(f"{f.relative_to(ROOT)}:{line}: {text[m.start() : m.start() + 50]!r}")
    for f in _user_docs():
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if ROLE.search(line):
                bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()[:80]}")
    assert bad == [], "use [`name`][vcpulab.module.name] (mkdocstrings) instead of Sphinx roles:\n" + "\n".join(bad)


def test_no_issue_numbers_in_user_docs_or_docstrings() -> None:
    # users have the docs, not the project's issue tracker: say what an issue means
    bad = []
    for f in _python_files():
        for line, text in _docstrings(f):
            for m in ISSUE.finditer(text):
                bad.append(
                    f"{f.relative_to(ROOT)}:{line}: {m.group(0)!r} in {text[max(m.start() - 30, 0) : m.end() + 20]!r}"
                )
    for f in _user_docs():
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if ISSUE.search(line):
                bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    assert bad == [], "\n".join(bad)


def test_notebooks_and_docs_use_public_names_only() -> None:
    bad = []
    for f in [*_user_docs(), *sorted((ROOT / "notebooks").glob("*.ipynb"))]:
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if PRIVATE_IMPORT.search(line):
                bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    assert bad == [], "import the public name (vcpulab.kvm.allowed_cpus, vcpulab.sim.VcpuView, ...):\n" + "\n".join(bad)


def test_every_public_module_is_in_the_reference_and_its_public_names_in_all() -> None:
    pages = "\n".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))
    rendered = set(re.findall(r"^::: ([\w.]+)", pages, re.MULTILINE))
    missing = [m for m in _public_modules() if m not in rendered]
    assert missing == [], f"public modules without a `::: module` block in docs/api/: {missing}"
    not_in_all = []
    for name in _public_modules():
        mod = importlib.import_module(name)
        assert hasattr(mod, "__all__"), f"{name} has no __all__ (the reference renders __all__)"
        if name in NOT_ALL_API:
            continue
        for attr, obj in vars(mod).items():
            if attr.startswith("_") or attr in mod.__all__ or isinstance(obj, TypeVar):
                continue
            defined_here = getattr(obj, "__module__", None) == name and callable(obj)
            if defined_here or (attr.isupper() and not callable(obj) and not isinstance(obj, type(sys))):
                if attr.isupper() and _imported(name, attr):
                    continue
                not_in_all.append(f"{name}.{attr}")
    assert not_in_all == [], f"public names missing from their module's __all__ (so from the reference): {not_in_all}"


def _imported(module: str, name: str) -> bool:
    """Whether ``name`` is imported into ``module`` rather than defined there."""
    tree = ast.parse(Path(importlib.import_module(module).__file__ or "").read_text())
    return any(isinstance(n, ast.ImportFrom) and any((a.asname or a.name) == name for a in n.names) for n in tree.body)


def test_the_policy_view_stubs_document_what_the_extension_documents() -> None:
    # vcpulab._core is compiled: the reference reads its stub (_core.pyi); each class and field of the
    # candidate view (what a Python policy receives) and each exception starts with the Rust doc comment
    from vcpulab import _core

    stub = ast.parse((PKG / "_core.pyi").read_text())
    classes = {n.name: n for n in stub.body if isinstance(n, ast.ClassDef)}
    names = ["VcpuView", "Spinner", "VcpulabError", "KvmUnavailableError", "KvmIoctlError"]
    names += ["GuestAssertionError", "UnexpectedExitError", "UnsupportedError", "TraceUnavailableError"]
    for name in names:
        node, runtime = classes[name], getattr(_core, name)
        doc = ast.get_docstring(node, clean=False) or ""
        assert doc.startswith(runtime.__doc__), (name, doc[:80], runtime.__doc__)
        if name in ("VcpuView", "Spinner"):
            fields = {}
            for i, stmt in enumerate(node.body[:-1]):
                nxt = node.body[i + 1]
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr):
                    fields[stmt.target.id] = nxt.value.value  # type: ignore[attr-defined]
            got = {k for k in vars(runtime) if not k.startswith("_")}
            assert set(fields) == got, (name, set(fields) ^ got)
            for k, d in fields.items():
                assert d.startswith(getattr(runtime, k).__doc__), (name, k, d, getattr(runtime, k).__doc__)


@pytest.mark.slow
def test_the_reference_builds_strictly_and_renders_every_public_name(tmp_path: Path) -> None:
    # a cross-reference that does not resolve, a broken docstring section or a missing page fails the build
    if shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -r docs/requirements.txt); CI builds the reference")
    for mod in ("mkdocstrings_handlers.python", "griffe_sphinx"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed (pip install -r docs/requirements.txt); CI builds the reference")
    site = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    warnings = [ln for ln in (r.stdout + r.stderr).splitlines() if "WARNING" in ln or "ERROR" in ln]
    assert r.returncode == 0 and not warnings, "\n".join(warnings) or r.stderr[-2000:]
    inv = _inventory(site / "objects.inv")
    missing = []
    for name in _public_modules():
        mod = importlib.import_module(name)
        for attr in mod.__all__:
            if f"{name}.{attr}" not in inv and not attr.startswith("__"):  # __version__: the reference hides dunders
                missing.append(f"{name}.{attr}")
    assert missing == [], f"in __all__ but not in the reference (a docstring or `#:` comment missing?): {missing}"
    html = "\n".join(p.read_text() for p in site.rglob("*.html"))
    assert not ROLE.search(html), "a literal Sphinx role in the built site"


def _inventory(path: Path) -> set[str]:
    data = path.read_bytes()
    body = zlib.decompress(data.split(b"\n", 4)[4]).decode()
    return {line.split(" ", 1)[0] for line in body.splitlines() if line}
