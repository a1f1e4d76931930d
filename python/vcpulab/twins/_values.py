"""Measured values and host knobs: a [`Value`][vcpulab.twins.Value] (a number, its unit and how it
was obtained), the [`Calibration`][vcpulab.twins.Calibration] that holds them, and
[`host_knobs`][vcpulab.twins.host_knobs], the running kernel's scheduler and halt-poll knobs read
from debugfs, the kernel config and the kvm module's parameters."""

from __future__ import annotations

import gzip
import json
import math
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from vcpulab.sim import halt_poll as _hp


@dataclass(frozen=True)
class Value:
    """One measured (or read) value: the number, its unit, and how it was obtained."""

    value: float
    unit: str
    how: str

    def __float__(self) -> float:
        return float(self.value)


#: the ``format`` of a saved calibration file
CALIBRATION_FORMAT = "vcpulab.twins.Calibration/1"

#: a calibration of the project's machine, shipped with the package: a 2-CPU
#: VM ("Intel(R) Xeon(R) Processor"), Linux 6.18.44, KVM through kvm_pvm
#: (guest code emulated), measured by ``twins.calibrate()`` on 2026-12-02
#: (its ``provenance`` says the rest). Its values describe that
#: host, not yours: use it to simulate twins where /dev/kvm is absent (CI, a
#: laptop), and calibrate your own host for twins of your runs.
REFERENCE_CALIBRATION = Path(__file__).with_name("reference_calibration.json")


@dataclass(frozen=True)
class Calibration:
    """What [`calibrate`][vcpulab.twins.calibrate] measured on this host (every entry a [`Value`][vcpulab.twins.Value]).

    Keys: ``path_insn_ns`` (ns per emulated instruction of the programs' fixed
    paths: loads, stores, RDTSC, XCHG, branches), ``loop_insn_ns`` (ns per
    instruction of a ``dec; jnz`` delay loop), ``insns_per_acq_measured`` /
    ``insns_per_acq_counted`` (the check of [`guest_path`][vcpulab.twins.guest_path]'s count),
    ``msi_round_insns`` (emulated instructions per MSI round), ``wake_block_ns``
    (MSI sent → vCPU running again after a blocked halt, minus the guest's
    instructions), ``wake_poll_ns`` (the same when the halt-poll loop caught
    the wake-up), ``tsc_khz``, ``wake_poll_iter_ns`` (one failed mailbox check
    of ``WakePlacement``'s poll loop; absent from calibrations before
    2026-12-05), ``ipi_round_insns`` / ``ipi_wake_ns`` / ``ipi_wake_spread``
    (an IPI to a halted vCPU: the round's instructions, one wake-up, its
    spread), ``halt_wake_ns`` (the host CPU of a blocked halt beyond a polled
    one; absent before 0.3.19, NaN where not measured), ``uexit_ns`` /
    ``sched_handoff_ns`` / ``spin_iter_ns`` / ``token_slice_exit_ns`` /
    ``token_slice_exit_spread`` (vcpulab's scheduler; the last two how late
    a token's slice ends and its spread, absent before 0.3.31),
    ``token_slice_exit_cpu_spread`` (how each CPU's slices end late by its
    own mean within a run; absent before 0.3.32),
    ``speed_fast_pct`` / ``speed_slow_pct`` / ``speed_fast_dwell_ns`` /
    ``speed_slow_dwell_ns`` (the host's speed over time,
    [`speed_probe`][vcpulab.twins.speed_probe]; absent before 0.3.26: one speed), and the
    host knobs of [`host_knobs`][vcpulab.twins.host_knobs].

    A calibration travels: [`save`][vcpulab.twins.Calibration.save] writes it
    as JSON with its provenance, [`load`][vcpulab.twins.Calibration.load]
    reads it, and [`twin`][vcpulab.twins.twin] / [`run_sim`][vcpulab.twins.run_sim]
    given one need no /dev/kvm
    ([`reference_calibration`][vcpulab.twins.reference_calibration]: the
    project machine's).
    """

    values: dict[str, Value]
    cpu: int
    #: where and when it was measured ([`vcpulab.provenance.provenance`][]:
    #: version, timestamp, machine, kernel); None for one made by hand
    provenance: dict[str, Any] | None = None

    def __getitem__(self, key: str) -> float:
        return float(self.values[key].value)

    def save(self, path: str | Path) -> Path:
        """Writes the calibration as JSON (every value with its unit and how
        it was measured, the CPU, and the provenance), whole or not at all.
        [`load`][vcpulab.twins.Calibration.load] reads it back: a twin can
        then be simulated where /dev/kvm is absent (CI, a laptop)."""
        if not isinstance(path, (str, Path)):
            raise TypeError(
                f"Calibration.save: path must be a file path (str or Path), got {type(path).__name__} {path!r}"
            )
        p = Path(path)
        if not str(path) or p.is_dir():
            raise ValueError(f"Calibration.save: path must name a file, got {str(path)!r} (a folder or empty)")
        if not p.parent.is_dir():
            raise ValueError(f"Calibration.save: the folder {p.parent} does not exist")
        doc = {
            "format": CALIBRATION_FORMAT,
            "cpu": self.cpu,
            # a value that is not a number (a knob read as text: see its "how") is null
            "values": {
                k: {"value": float(v.value) if math.isfinite(float(v.value)) else None, "unit": v.unit, "how": v.how}
                for k, v in self.values.items()
            },
            "provenance": self.provenance,
        }
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
            os.replace(tmp, p)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return p

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """The calibration [`save`][vcpulab.twins.Calibration.save] wrote to
        ``path``. ``ValueError`` naming the problem for a file that is not
        one (another format, a value without a number or unit)."""
        if not isinstance(path, (str, Path)):
            raise TypeError(
                f"Calibration.load: path must be a file path (str or Path), got {type(path).__name__} {path!r}"
            )
        p = Path(path)
        try:
            doc = json.loads(p.read_text())
        except FileNotFoundError:
            raise ValueError(f"Calibration.load: no such file {p}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"Calibration.load: {p} is not a calibration file ({e})") from None
        if not isinstance(doc, dict) or doc.get("format") != CALIBRATION_FORMAT:
            raise ValueError(f"Calibration.load: {p} is not a {CALIBRATION_FORMAT} file")
        cpu, raw = doc.get("cpu"), doc.get("values")
        if isinstance(cpu, bool) or not isinstance(cpu, int) or cpu < 0 or not isinstance(raw, dict) or not raw:
            raise ValueError(f"Calibration.load: {p} needs a CPU id and a non-empty 'values' table")
        values: dict[str, Value] = {}
        for k, v in raw.items():
            x = v.get("value") if isinstance(v, dict) else None
            ok = (
                isinstance(v, dict)
                and (x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)))
                and isinstance(v.get("unit"), str)
                and isinstance(v.get("how"), str)
            )
            if not ok:
                raise ValueError(
                    f"Calibration.load: {p}: value {k!r} needs a finite 'value' (or null), a 'unit' and a 'how'"
                )
            values[k] = Value(math.nan if x is None else float(x), v["unit"], v["how"])
        prov = doc.get("provenance")
        return cls(values=values, cpu=cpu, provenance=prov if isinstance(prov, dict) else None)

    def frame(self) -> pl.DataFrame:
        """One row per value: name, value, unit, how."""
        return pl.DataFrame(
            {
                "name": list(self.values),
                "value": [float(v.value) for v in self.values.values()],
                "unit": [v.unit for v in self.values.values()],
                "how": [v.how for v in self.values.values()],
            }
        )


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _read_why(path: str) -> tuple[str | None, str]:
    try:
        with open(path) as f:
            return f.read().strip(), ""
    except OSError as e:
        return None, f"unreadable ({e.strerror})"


def _mount_debugfs() -> bool:
    """Mount debugfs at /sys/kernel/debug when it is not (root only, by mount(2);
    it stays mounted and vcpulab says so once: vcpulab._mounts); True if mounted."""
    from vcpulab._mounts import ensure_mounted

    if os.path.isdir("/sys/kernel/debug/sched"):
        return True
    try:
        ensure_mounted("debugfs")
    except OSError:
        return False
    return os.path.isdir("/sys/kernel/debug/sched")


def _kernel_config() -> dict[str, str]:
    text = None
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            text = f.read()
    except OSError:
        text = _read(f"/boot/config-{platform.release()}")
    out: dict[str, str] = {}
    for ln in (text or "").splitlines():
        m = re.match(r"^(CONFIG_[A-Z0-9_]+)=(.*)$", ln)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def host_knobs() -> dict[str, Value]:
    """The running kernel's scheduler and halt-poll knobs, each with where it was read.

    * ``base_slice_ns``: EEVDF's ``sysctl_sched_base_slice`` from
      ``/sys/kernel/debug/sched/base_slice_ns`` (debugfs is mounted when it is
      not and this process is root; it stays mounted, see ``vcpulab._mounts``); where unreadable, the kernel's rule
      0.75 ms × (1 + ilog2(min(ncpus, 8))) (``update_sysctl``,
      kernel/sched/fair.c) with ``how`` saying so.
    * ``tick_ns``: 1e9 / CONFIG_HZ (``/proc/config.gz`` or /boot/config-*).
    * ``preempt``: the preemption model (debugfs ``sched/preempt``), as text in ``how``.
    * ``halt_poll_ns``, ``halt_poll_ns_grow``, ``halt_poll_ns_grow_start``,
      ``halt_poll_ns_shrink``: ``/sys/module/kvm/parameters``.
    * ``machine_cpus``: the CPUs this process may run on
      (``sched_getaffinity``): the run's vCPUs use some of them, its VMM
      thread and the host's other tasks may use them all.
    """
    out: dict[str, Value] = {}
    ncpu = os.cpu_count() or 1
    mounted = _mount_debugfs()
    bs, why = _read_why("/sys/kernel/debug/sched/base_slice_ns") if mounted else (None, "debugfs not mounted")
    if bs is not None and bs.isdigit():
        out["base_slice_ns"] = Value(int(bs), "ns", "read /sys/kernel/debug/sched/base_slice_ns")
    else:
        v = 750_000 * (1 + int(math.log2(min(ncpu, 8))))
        out["base_slice_ns"] = Value(
            v,
            "ns",
            f"/sys/kernel/debug/sched/base_slice_ns: {why}; kernel rule 0.75 ms x (1 + ilog2(min({ncpu}, 8))) "
            "(update_sysctl, SCHED_TUNABLESCALING_LOG default)",
        )
    cfg = _kernel_config()
    hz = cfg.get("CONFIG_HZ")
    if hz and hz.isdigit():
        out["tick_ns"] = Value(1_000_000_000 // int(hz), "ns", f"1e9 / CONFIG_HZ={hz} from the kernel config")
    else:
        out["tick_ns"] = Value(4_000_000, "ns", "kernel config unreadable; Kconfig default HZ=250")
    pre, why = _read_why("/sys/kernel/debug/sched/preempt") if mounted else (None, "debugfs not mounted")
    model = pre or "; ".join(
        f"{k}={cfg[k]}"
        for k in ("CONFIG_PREEMPT_NONE", "CONFIG_PREEMPT_VOLUNTARY", "CONFIG_PREEMPT", "CONFIG_PREEMPT_DYNAMIC")
        if k in cfg
    )
    out["preempt"] = Value(
        float("nan"), "", f"preemption model: {model} ({'debugfs sched/preempt' if pre else why + '; kernel config'})"
    )
    for name, v in _hp.host_params().items():  # the host's, or the kernel default where unreadable
        unit = "ns" if name.endswith(("_ns", "start")) else ""
        out[name] = Value(v, unit, _hp.host_params.sources[name])  # type: ignore[attr-defined]
    out["machine_cpus"] = Value(len(os.sched_getaffinity(0)), "", "CPUs this process may run on (sched_getaffinity)")
    return out


def reference_calibration() -> Calibration:
    """The calibration of the project's machine shipped with vcpulab
    ([`REFERENCE_CALIBRATION`][vcpulab.twins.REFERENCE_CALIBRATION]): for
    simulating twins where /dev/kvm is absent.

        >>> from vcpulab import twins
        >>> from vcpulab.experiment import SpinLock
        >>> cal = twins.reference_calibration()
        >>> exp = twins.Experiment(SpinLock(kind="ticket"), vcpus=3, pcpus=(1,), duration_s=0.05)
        >>> twins.twin(exp, cal).host.n_pcpus >= 1
        True
    """
    return Calibration.load(REFERENCE_CALIBRATION)
