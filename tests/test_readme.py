"""Every code block of the README runs as it is written.

* each ```python block runs in a fresh interpreter; a block that touches real
  KVM (``vcpulab.experiment`` / ``vcpulab.kvm``) needs the ``kvm_host``
  fixture and skips, naming the reason, where /dev/kvm is unusable; a
  real-KVM run is shortened (``duration_s=`` at most 0.2 s) since only its
  shape is compared;
* the ```text block after a python block is what it prints: exactly, for a
  simulator block (deterministic); line for line in shape for a real-KVM one
  (the same frame header, as many rows, then the quality line);
* the ```sh blocks are the two set-up commands, exactly, and every
  ``vcpulab ...`` or ``python -m ...`` command the README names exists with
  the flags it names (``--help``).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
BLOCKS = [(m.group(1), m.group(2), README[: m.start()].count("\n") + 1) for m in FENCE.finditer(README)]
REAL_KVM = re.compile(r"\bvcpulab\.(experiment|kvm)\b|\bfrom vcpulab import (experiment|kvm)\b")


def _python_blocks() -> list[tuple[str, str | None, int]]:
    """(code, the text block that follows it or None, line) of each python block."""
    out = []
    for i, (lang, code, line) in enumerate(BLOCKS):
        if lang == "python":
            nxt = BLOCKS[i + 1] if i + 1 < len(BLOCKS) else None
            out.append((code, nxt[1] if nxt is not None and nxt[0] == "text" else None, line))
    return out


PY = _python_blocks()
SIM = [b for b in PY if not REAL_KVM.search(b[0])]
KVM = [b for b in PY if REAL_KVM.search(b[0])]


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_the_readme_has_its_examples() -> None:
    assert len(SIM) >= 1 and len(KVM) >= 1, [b[2] for b in PY]
    assert all(b[1] is not None for b in PY), "each python block is followed by the ```text block it prints"


@pytest.mark.parametrize("code,printed,line", SIM, ids=[f"line{b[2]}" for b in SIM])
def test_simulator_block_prints_what_the_readme_says(code: str, printed: str | None, line: int) -> None:
    r = _run(code)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == printed, f"README line {line}: the block now prints\n{r.stdout}"


@pytest.mark.parametrize("code,printed,line", KVM, ids=[f"line{b[2]}" for b in KVM])
def test_real_kvm_block_runs_and_prints_the_readmes_shape(kvm_host, code: str, printed: str | None, line: int) -> None:  # type: ignore[no-untyped-def]
    short = re.sub(r"duration_s=([0-9.]+)", lambda m: f"duration_s={min(float(m.group(1)), 0.2)}", code)
    r = _run(short)
    assert r.returncode == 0, r.stderr[-3000:]
    got, want = r.stdout.splitlines(), (printed or "").splitlines()
    assert len(got) == len(want), f"README line {line}: printed\n{r.stdout}"
    for g, w in zip(got, want):
        if w.startswith("quality: "):
            assert g.startswith("quality: "), g
        elif not re.search(r"\d\.\d", w):  # the frame's frame lines, header and keys (not its measured values)
            assert g == w, (g, w)


# ---------------------------------------------------------------------------------------------- shell


def test_the_two_set_up_commands_are_there_exactly_and_true() -> None:
    sh = [code.strip() for lang, code, _ in BLOCKS if lang == "sh"]
    assert sh == ["pip install . && vcpulab demo", "pip install '.[test]' && pytest"], sh
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["vcpulab"] == "vcpulab.cli:main"
    assert "pytest>=8" in project["optional-dependencies"]["test"]
    r = subprocess.run([sys.executable, "-m", "vcpulab.cli", "demo", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "usage: vcpulab demo" in r.stdout, r.stderr


def _named_commands() -> list[list[str]]:
    """Every `vcpulab ...` and `python -m ...` / `python benches/...` command the README names in backticks."""
    out = []
    for m in re.finditer(r"`((?:vcpulab|python)\s[^`]+)`", README.replace("\n", " ")):
        words = shlex.split(m.group(1).split("&&")[0])
        if words[0] == "python" and words[1:2] != ["-m"] and not words[1].startswith("benches/"):
            continue
        out.append(words)
    return out


COMMANDS = _named_commands()


@pytest.mark.parametrize("words", COMMANDS, ids=[" ".join(w) for w in COMMANDS])
def test_each_command_the_readme_names_exists_with_its_flags(words: list[str]) -> None:
    if words[0] == "vcpulab":
        base = [sys.executable, "-m", "vcpulab.cli"]
        args = words[1:]
    elif words[1] == "-m":
        base = [sys.executable, "-m", words[2]]
        args = words[3:]
    else:
        assert (ROOT / words[1]).is_file(), words[1]
        base = [sys.executable, str(ROOT / words[1])]
        args = words[2:]
    # the subcommands: words before the first flag that are not values (PID, files, numbers)
    sub = []
    for w in args:
        if w.startswith("-"):
            break
        if w.isupper() or "." in w or "/" in w or w.isdigit():
            break
        sub.append(w)
    r = subprocess.run([*base, *sub, "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, (words, r.stderr[-1000:])
    for flag in (w for w in args if w.startswith("--")):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", r.stdout), f"{' '.join(words)}: no {flag} in --help"
