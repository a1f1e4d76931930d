"""The property layer of the real-KVM and experiment API (tests/kvm_properties.py),
run in a subprocess: an abort or a hang (the script's watchdog kills it) fails
this test instead of killing pytest.

A few examples per property keep it under ~30 s here; set
``VCPULAB_PROPERTY_EXAMPLES`` (e.g. 200) for a longer search.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).with_name("kvm_properties.py")


def test_kvm_api_properties(kvm_host: Any) -> None:
    examples = int(os.environ.get("VCPULAB_PROPERTY_EXAMPLES", "8"))
    watchdog = 60 + 20 * examples
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--examples", str(examples), "--watchdog", str(watchdog)],
        capture_output=True,
        text=True,
        timeout=watchdog + 30,
        env={**os.environ, "RUST_BACKTRACE": "0"},
    )
    assert p.returncode == 0 and "ALL PROPERTIES HOLD" in p.stdout, (
        f"exit status {p.returncode}\n--- stdout\n{p.stdout[-4000:]}\n--- stderr\n{p.stderr[-8000:]}"
    )
