"""Real KVM from Python: the host's ``/dev/kvm``, VMs, vCPUs, steal time, stats.

A first look::

    from vcpulab.kvm import Host

    host = Host()
    with host.create_vm(memory_mib=16) as vm:
        prog = vm.load("pause_loop", iterations=1000)
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        vcpu.run_program(timeout_s=5)          # runs until the guest says DONE
        print(vm.results(prog)["counter"][0])  # 1000, read from guest RAM

Everything that enters ``KVM_RUN`` has a deadline and releases the GIL; Ctrl-C
interrupts it promptly. Guest programs are small 64-bit routines assembled in
Rust with iced-x86 (see [`PROGRAMS`][vcpulab.kvm.PROGRAMS]). The guest environment (page tables,
GDT, IDT, stacks, xAPIC mapping) is documented in ``src/kvm/guest/mod.rs``.

What this host's KVM can and cannot do is measured, not assumed: see
``Host.capabilities``, ``Host.pv_features`` and ``Host.module_params``.
"""

from __future__ import annotations

import numbers
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vcpulab import _checks, _core, _procfs
from vcpulab._checks import (
    ForkSafe,
    check_bool,
    check_float,
    check_int,
    check_seq,
    checks_inline,
    fork_checked,
    guard_panics,
    new_token,
    renamed,
)
from vcpulab._core import (  # noqa: F401  (re-exported)
    GuestAssertionError,
    KvmIoctlError,
    KvmUnavailableError,
    TraceUnavailableError,
    UnexpectedExitError,
    UnsupportedError,
)

__all__ = [
    "Attached",
    "CpuidEntry",
    "EXIT_KINDS",
    "Exit",
    "Host",
    "IRQ_COUNTS_ADDR",
    "MAX_MEMORY_MIB",
    "MAX_TIMEOUT_S",
    "MSI_PING_MAX_COUNT",
    "MSR_KVM_STEAL_TIME",
    "MsiTrain",
    "PROGRAMS",
    "PROGRAM_PARAMS",
    "Program",
    "Regs",
    "RunResult",
    "STEAL_DTYPE",
    "Segment",
    "Sregs",
    "StealTime",
    "UCALL_PORT",
    "Vcpu",
    "Vm",
    "allowed_cpus",
    "attach",
    "kvm_available",
    "module_params",
    "sample_stats",
    "virtualization",
]

#: Port of the guest → host ucall protocol.
UCALL_PORT: int = _core.UCALL_PORT
#: Guest-physical address of the per-vector interrupt counters (256 × u64).
IRQ_COUNTS_ADDR: int = _core.IRQ_COUNTS_ADDR
#: ``MSR_KVM_STEAL_TIME``.
MSR_KVM_STEAL_TIME: int = _core.MSR_KVM_STEAL_TIME
#: Largest guest RAM in MiB (one slot below the 3 GiB MMIO hole).
MAX_MEMORY_MIB: int = _core.MAX_MEMORY_MIB

#: Built-in guest programs: name → what it does (read from the Rust registry,
#: ``PROGRAMS`` in ``src/kvm/guest/spec.rs``; [`PROGRAM_PARAMS`][vcpulab.kvm.PROGRAM_PARAMS] gives each one's
#: keyword parameters).
PROGRAMS: dict[str, str] = {name: doc for name, _params, doc in _core.GUEST_PROGRAMS}
#: name → the keyword parameters [`Vm.load`][vcpulab.kvm.Vm.load] accepts for it.
PROGRAM_PARAMS: dict[str, tuple[str, ...]] = {name: tuple(params) for name, params, _doc in _core.GUEST_PROGRAMS}
#: Every [`Exit.kind`][vcpulab.kvm.Exit] (from ``src/kvm/exit.rs``); ``run_until`` also takes ``"ucall"``.
EXIT_KINDS: tuple[str, ...] = tuple(_core.EXIT_KINDS)

#: numpy dtype of one steal-time snapshot (see [`Vm.steal_times`][vcpulab.kvm.Vm.steal_times]).
STEAL_DTYPE = np.dtype(
    [
        ("steal_ns", "<u8"),
        ("version", "<u4"),
        ("flags", "<u4"),
        ("preempted", "u1"),
        ("is_idle", "u1"),
        ("_pad", "V6"),
    ]
)

#: KVM_X86_DISABLE_EXITS_* bits by name (from ``src/kvm/system.rs``).
_DISABLE_EXIT_BITS: dict[str, int] = dict(_core.DISABLE_EXITS_BITS)
_U64 = 2**64 - 1
_U32 = 2**32 - 1
#: Most rounds of one [`Vm.msi_ping`][vcpulab.kvm.Vm.msi_ping] (its result array: 8 bytes a round).
MSI_PING_MAX_COUNT = 10_000_000
#: Longest wait of one call, s (timeouts, MSI gaps).
MAX_TIMEOUT_S = 86_400.0


# --------------------------------------------------------------------------- host


def module_params(sysfs: str | os.PathLike[str] = "/sys/module") -> dict[str, dict[str, Any]]:
    """Typed values of every file under ``/sys/module/kvm*/parameters``.

    ``{"kvm": {"halt_poll_ns": 200000, ...}, "kvm_intel": {"ple_gap": 128, ...}}``.
    Y/N become bools, numbers ints, anything else a string; a file that cannot
    be read is reported as ``None``. PLE parameters appear only where
    ``kvm_intel``/``kvm_amd`` are loaded.
    """
    return _procfs.module_params(sysfs, "kvm")


def virtualization(cpuinfo: str = "/proc/cpuinfo", sysfs: str = "/sys/module") -> str:
    """'vmx' or 'svm' when the CPU flags show hardware virtualization, else the
    name of the loaded KVM vendor module (e.g. 'kvm_pvm'), else 'unknown'."""
    try:
        flags = next(
            (
                line.split(":", 1)[1].split()
                for line in Path(cpuinfo).read_text().splitlines()
                if line.startswith("flags")
            ),
            [],
        )
    except OSError:
        flags = []
    for f in ("vmx", "svm"):
        if f in flags:
            return f
    vendors = sorted(p.name for p in Path(sysfs).glob("kvm_*") if p.is_dir())
    return vendors[0] if vendors else "unknown"


def allowed_cpus() -> list[int]:
    """The host CPU ids this process may run on (its affinity mask,
    ``sched_getaffinity``), sorted: the CPUs ``pcpus=`` may name."""
    return sorted(_core.allowed_cpus())


def kvm_available(path: str = "/dev/kvm") -> tuple[bool, str]:
    """(True, "") when /dev/kvm can be opened, else (False, the exact reason)."""
    try:
        _core.Host(path)
    except KvmUnavailableError as e:
        return False, str(e)
    return True, ""


def _timeout(v: Any, name: str = "timeout_s") -> float:
    return check_float(name, v, 0.0, MAX_TIMEOUT_S, lo_open=True, unit="s")


@guard_panics
@fork_checked
class Host(ForkSafe):
    """The host's ``/dev/kvm``.

    Raises [`vcpulab.KvmUnavailableError`][] with the reason and the fix
    when it is missing or not accessible. Cannot be copied or pickled, nor
    used in a child forked after it was created (``TypeError`` /
    ``RuntimeError``): open a new one there.
    """

    def __init__(self, path: str = "/dev/kvm") -> None:
        self._fork_init()
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str, got {type(path).__name__} {path!r}")
        path = os.fspath(path)
        if not path:
            raise ValueError("path must name the KVM device (default /dev/kvm), got ''")
        self._host = _core.Host(path)
        self.path = path

    @property
    def api_version(self) -> int:
        """``KVM_GET_API_VERSION`` (12 on every current kernel)."""
        return self._host.api_version

    @property
    def max_vcpus(self) -> int:
        """``KVM_CAP_MAX_VCPUS``: most vCPUs per VM."""
        return self._host.max_vcpus

    @property
    def max_vcpu_id(self) -> int:
        """``KVM_CAP_MAX_VCPU_ID``: vCPU ids must be below this."""
        return self._host.max_vcpu_id

    @property
    def capabilities(self) -> dict[str, int]:
        """``KVM_CHECK_EXTENSION`` of the named capabilities (0 = absent).

        ``KVM_CAP_X86_DISABLE_EXITS`` is the mask of exits that may be disabled
        (see [`disable_exits_allowed`][vcpulab.kvm.Host.disable_exits_allowed]).
        """
        return {name: value for name, _num, value in self._host.capabilities()}

    def check_extension(self, cap: int) -> int:
        """``KVM_CHECK_EXTENSION`` for a raw capability number."""
        return self._host.check_extension(check_int("cap", cap, 0, _U32))

    @property
    def disable_exits_allowed(self) -> set[str]:
        """Exits ``KVM_CAP_X86_DISABLE_EXITS`` may disable on this host."""
        mask = self.capabilities.get("KVM_CAP_X86_DISABLE_EXITS", 0)
        return {n for n, b in _DISABLE_EXIT_BITS.items() if mask & b}

    @property
    def pv_features(self) -> dict[str, bool]:
        """KVM PV feature bits of ``KVM_GET_SUPPORTED_CPUID`` leaf 0x40000001 EAX."""
        return dict(self._host.pv_features())

    @property
    def pv_feature_bits(self) -> int:
        return self._host.pv_feature_bits

    @property
    def module_params(self) -> dict[str, dict[str, Any]]:
        """See [`module_params`][vcpulab.kvm.Host.module_params]."""
        return module_params()

    @property
    def virtualization(self) -> str:
        """See [`virtualization`][vcpulab.kvm.Host.virtualization]."""
        return virtualization()

    def supported_cpuid(self) -> list[CpuidEntry]:
        """``KVM_GET_SUPPORTED_CPUID``."""
        return [CpuidEntry(*e) for e in self._host.supported_cpuid()]

    def create_vm(self, memory_mib: int = 16, irqchip: bool = True) -> Vm:
        """A VM with ``memory_mib`` MiB of RAM (2..3072) in long mode.

        With ``irqchip`` (the default) the kernel emulates the LAPICs, so HLT
        blocks in the kernel (halt polling applies) and MSIs/IPIs work; without
        it every HLT exits to user space.
        """
        if isinstance(memory_mib, int) and not isinstance(memory_mib, bool) and memory_mib <= 0:
            raise ValueError(f"memory_mib must be positive, got {memory_mib}")
        memory_mib = check_int("memory_mib", memory_mib, 1, MAX_MEMORY_MIB)
        check_bool("irqchip", irqchip)
        return Vm(self._host.create_vm(memory_mib, irqchip), self, memory_mib)

    def __repr__(self) -> str:
        return f"Host({self.path!r}, api_version={self.api_version}, max_vcpus={self.max_vcpus}, virtualization={self.virtualization!r})"

    def _repr_html_(self) -> str:
        from vcpulab._display import table

        kvm = self.module_params.get("kvm", {})
        return table(
            f"KVM host ({self.path})",
            [
                ("API version", self.api_version),
                ("virtualization", self.virtualization),
                ("max vCPUs / max vCPU id", f"{self.max_vcpus} / {self.max_vcpu_id}"),
                (
                    "halt polling",
                    f"halt_poll_ns={kvm.get('halt_poll_ns')}, grow={kvm.get('halt_poll_ns_grow')}, "
                    f"grow_start={kvm.get('halt_poll_ns_grow_start')}, shrink={kvm.get('halt_poll_ns_shrink')}",
                ),
                ("exits that can be disabled", self.disable_exits_allowed),
                ("PV features", {n for n, on in self.pv_features.items() if on}),
                ("capabilities", {k: v for k, v in self.capabilities.items()}),
            ],
        )


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class CpuidEntry:
    """One CPUID leaf as KVM reports it (``KVM_GET_SUPPORTED_CPUID``): the
    function and index it answers, its flags, and the four registers."""

    function: int
    index: int
    flags: int
    eax: int
    ebx: int
    ecx: int
    edx: int


@dataclass
class Regs:
    """General-purpose registers (``KVM_GET_REGS``), by name."""

    rax: int = 0
    rbx: int = 0
    rcx: int = 0
    rdx: int = 0
    rsi: int = 0
    rdi: int = 0
    rsp: int = 0
    rbp: int = 0
    r8: int = 0
    r9: int = 0
    r10: int = 0
    r11: int = 0
    r12: int = 0
    r13: int = 0
    r14: int = 0
    r15: int = 0
    rip: int = 0
    rflags: int = 0x2


@dataclass
class Segment:
    """A segment register of [`Sregs`][vcpulab.kvm.Sregs] (``struct kvm_segment``)."""

    base: int
    limit: int
    selector: int
    type: int
    present: int
    dpl: int
    db: int
    s: int
    l: int  # noqa: E741  (the SDM's name)
    g: int
    avl: int
    unusable: int


@dataclass
class Sregs:
    """Special registers (``KVM_GET_SREGS``): segments, tables, control registers."""

    cs: Segment
    ds: Segment
    es: Segment
    fs: Segment
    gs: Segment
    ss: Segment
    tr: Segment
    ldt: Segment
    gdt: tuple[int, int]
    idt: tuple[int, int]
    cr0: int
    cr2: int
    cr3: int
    cr4: int
    cr8: int
    efer: int
    apic_base: int

    @property
    def long_mode(self) -> bool:
        """EFER.LMA and CS.L: the vCPU executes 64-bit code."""
        return bool(self.efer & (1 << 10)) and bool(self.cs.l)


#: One decoded vCPU exit (built in Rust, ``src/py/exit.rs``): ``kind`` (one of
#: [`EXIT_KINDS`][vcpulab.kvm.EXIT_KINDS]) and the fields meaningful for it (port, size, count,
#: direction, data, data_bytes for IO; address, length, is_write, data,
#: data_bytes for MMIO; suberror/internal_data, reason/cpu, event_type/event_data,
#: reason/name for the rarer kinds); the others are ``None``. ``str(exit)``
#: gives ``io port=0x80 size=0x1 …``; ``exit.to_dict()`` every field.
Exit = _core.Exit


@dataclass(frozen=True)
class RunResult:
    """How [`Vcpu.run_until`][vcpulab.kvm.Vcpu.run_until] ended."""

    exit: Exit
    #: ("sync", value) or ("done", 0) when the match was a ucall.
    ucall: tuple[str, int] | None
    matches: int
    exits: int
    #: True when a [`Vcpu.kick`][vcpulab.kvm.Vcpu.kick] stopped the run early.
    interrupted: bool
    wall_s: float


@dataclass(frozen=True)
class StealTime:
    """A consistent snapshot of ``struct kvm_steal_time`` (read with the version protocol)."""

    steal_ns: int
    version: int
    flags: int
    #: ``KVM_VCPU_PREEMPTED`` (bit 0) / ``KVM_VCPU_FLUSH_TLB`` (bit 1).
    preempted: int
    #: ``u8_pad[0]``: the ``is_idle`` byte of the unmerged 2021 pcpu_is_idle proposal.
    is_idle: int

    @property
    def is_preempted(self) -> bool:
        return bool(self.preempted & 1)


@dataclass(frozen=True)
class Program:
    """A guest program loaded into a VM; ``results`` names its shared-memory layout."""

    #: identity of the VM it was loaded into (a program is only valid there)
    vm_id: int
    name: str
    entry: int
    code_size: int
    data: int
    data_size: int
    results: tuple[dict[str, Any], ...]
    params: dict[str, int]
    asserts: tuple[tuple[str, str], ...] = field(default=())


@dataclass(frozen=True)
class MsiTrain:
    """What [`Vm.msi_train`][vcpulab.kvm.Vm.msi_train] did."""

    sent: int
    elapsed_s: float
    max_late_us: float


# --------------------------------------------------------------------------- VM


@guard_panics
@fork_checked
class Vm(ForkSafe):
    """A KVM VM (create with [`Host.create_vm`][vcpulab.kvm.Host.create_vm]).

    A context manager: leaving the ``with`` block (exceptions included) kicks
    running vCPUs out of ``KVM_RUN`` and releases every fd and mapping. A
    closed Vm raises ``ValueError`` on use. A numpy view from [`memory`][vcpulab.kvm.Vm.memory]
    keeps guest RAM mapped until the view itself is gone. A Vm cannot be
    copied or pickled (``TypeError``), nor used in a child forked after it was
    created (``RuntimeError``).
    """

    def __init__(self, core: Any, host: Host, memory_mib: int) -> None:
        self._fork_init()
        #: names this VM in the Programs loaded into it (unique, unlike id())
        self._token = new_token()
        self._vm = core
        self.host = host
        self.memory_mib = memory_mib
        self.vcpus: list[Vcpu] = []

    def __enter__(self) -> Vm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # No __del__: a Vm left to the garbage collector is closed by its core's
    # Drop (src/py/kvm.rs), where no Python code runs, so a Ctrl-C cannot land
    # in a finalizer and be lost; in a forked child it kicks nothing.

    def close(self) -> None:
        """Release everything (idempotent)."""
        self._vm.close()

    @property
    def closed(self) -> bool:
        return self._vm.closed

    @property
    def irqchip(self) -> bool:
        return self._vm.irqchip

    # memory -----------------------------------------------------------------
    @property
    def memory(self) -> np.ndarray:
        """Writable, zero-copy numpy ``uint8`` view of guest RAM (index = gpa)."""
        return self._vm.memory

    def read(self, gpa: int, n: int) -> bytes:
        """``n`` bytes at guest-physical ``gpa`` (IndexError outside RAM)."""
        return self._vm.read(_gpa(gpa), check_int("n", n, 0, self.memory_mib << 20))  # at most all of RAM

    def write(self, gpa: int, data: bytes | bytearray | memoryview) -> None:
        """Copy ``data`` to ``gpa`` (IndexError outside RAM)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"data must be bytes, bytearray or memoryview, got {type(data).__name__} {data!r} "
                "(bytes(n) would be n zero bytes; use write_u8/write_u64 for a number)"
            )
        self._vm.write(_gpa(gpa), bytes(data))

    def read_u64(self, gpa: int) -> int:
        return self._vm.read_u64(_gpa(gpa))

    def write_u64(self, gpa: int, value: int) -> None:
        if not 0 <= check_int("value", value) <= _U64:
            raise ValueError(f"value must fit in a u64, got {value}")
        self._vm.write_u64(_gpa(gpa), int(value))

    def write_u8(self, gpa: int, value: int) -> None:
        if not 0 <= check_int("value", value) <= 255:
            raise ValueError(f"value must fit in a byte, got {value}")
        self._vm.write_u8(_gpa(gpa), int(value))

    # programs -----------------------------------------------------------------
    def load(self, program: str, **params: int) -> Program:
        """Assemble and load a built-in guest program (see [`PROGRAMS`][vcpulab.kvm.PROGRAMS])."""
        if not isinstance(program, str):
            raise TypeError(f"program must be a str (a name of PROGRAMS), got {type(program).__name__}")
        for k, v in params.items():
            if isinstance(v, str):
                continue
            check_int(f"{program}: parameter {k}", v, 0, _U64)
        try:
            d = self._vm.load(program, **params)
        except TypeError as e:
            raise TypeError(f"{program}: a parameter has the wrong type ({e}); got {params}") from None
        return Program(
            vm_id=self._token,
            name=d["name"],
            entry=d["entry"],
            code_size=d["code_size"],
            data=d["data"],
            data_size=d["data_size"],
            results=tuple(d["results"]),
            params=dict(d["params"]),
            asserts=tuple(d["asserts"]),
        )

    def results(self, program: Program) -> dict[str, np.ndarray]:
        """The program's documented result fields, as numpy uint64 arrays (copies)."""
        _check_owner(program, self)
        out = {}
        for r in program.results:
            stride, count = r["stride"], r["count"]
            raw = self.read(r["gpa"], stride * (count - 1) + 8)
            out[r["name"]] = np.ndarray((count,), dtype="<u8", buffer=raw, strides=(stride,)).copy()
        return out

    def irq_counts(self) -> np.ndarray:
        """Interrupts taken per vector (256 × u64), counted by the guest's IDT handler."""
        return np.frombuffer(self.read(IRQ_COUNTS_ADDR, 256 * 8), dtype="<u8").copy()

    # vCPUs ----------------------------------------------------------------------
    def create_vcpu(self, id: int) -> Vcpu:
        """vCPU ``id`` in 64-bit mode, parked in a halt loop until [`Vcpu.start`][vcpulab.kvm.Vcpu.start].

        Guest programs that use the xAPIC (interrupts, IPIs, timers) need ids
        below 256: the xAPIC id is 8 bits wide."""
        if isinstance(id, int) and not isinstance(id, bool) and id < 0:
            raise IndexError(f"vCPU id must be >= 0, got {id}")
        v = Vcpu(self._vm.create_vcpu(check_int("id", id, 0, _U32)), self)
        self.vcpus.append(v)
        return v

    # knobs --------------------------------------------------------------------------
    @property
    def halt_poll_ns(self) -> int:
        """Maximum halt-poll time of this VM (ns).

        The per-VM value set through this property (``KVM_CAP_HALT_POLL``), or,
        until one is set, the module parameter ``kvm.halt_poll_ns`` that applies.
        """
        override = self._vm.halt_poll_override()
        if override is not None:
            return override
        return int(module_params().get("kvm", {}).get("halt_poll_ns") or 0)

    @halt_poll_ns.setter
    def halt_poll_ns(self, ns: int) -> None:
        if not isinstance(ns, numbers.Integral) or isinstance(ns, bool) or ns < 0:
            raise ValueError(f"halt_poll_ns must be a non-negative int (ns), got {ns!r}")
        self._vm.set_halt_poll_ns(check_int("halt_poll_ns", ns, 0, _U64))  # the core says why > u32 fails

    @property
    def disable_exits_allowed(self) -> set[str]:
        mask = self._vm.allowed_disable_exits()
        return {n for n, b in _DISABLE_EXIT_BITS.items() if mask & b}

    @property
    def disabled_exits(self) -> set[str]:
        mask = self._vm.disabled_exits()
        return {n for n, b in _DISABLE_EXIT_BITS.items() if mask & b}

    def disable_exits(
        self, *, pause: bool = False, hlt: bool = False, mwait: bool = False, cstate: bool = False
    ) -> None:
        """``KVM_CAP_X86_DISABLE_EXITS``: keep PAUSE/HLT/MWAIT/C-states in the guest.

        Must come before the first vCPU. Disabling PAUSE exits turns pause-loop
        exiting off (an effect only VMX/SVM hosts show); disabling HLT exits
        means no halt polling and a vCPU thread that looks 100 % busy.
        """
        for name, on in (("pause", pause), ("hlt", hlt), ("mwait", mwait), ("cstate", cstate)):
            check_bool(name, on)
        bits = (pause and 4) | (hlt and 2) | (mwait and 1) | (cstate and 8)
        if bits == 0:
            raise ValueError("disable_exits: name at least one of pause, hlt, mwait, cstate")
        self._vm.disable_exits(bits)

    def send_msi(self, dest_apic_id: int, vector: int) -> None:
        """``KVM_SIGNAL_MSI``: a fixed-delivery interrupt ``vector`` to a LAPIC."""
        self._vm.send_msi(check_int("dest_apic_id", dest_apic_id, 0, _U32), check_int("vector", vector, 0, 255))

    def msi_train(self, dest_apic_id: int, vector: int, count: int, gap_us: float) -> MsiTrain:
        """Send ``count`` MSIs ``gap_us`` apart (timed in Rust, GIL released).

        Ctrl-C (``KeyboardInterrupt``) and [`close`][vcpulab.kvm.Vm.close] (from another thread)
        stop it within ~20 ms, also in the middle of a long gap; the MSIs sent
        until then are counted in the result."""
        dest_apic_id = check_int("dest_apic_id", dest_apic_id, 0, _U32)
        vector = check_int("vector", vector, 0, 255)
        count = check_int("count", count, 0, _U32)
        gap_us = check_float("gap_us", gap_us, 0.0, MAX_TIMEOUT_S * 1e6, unit="µs")
        sent, elapsed_ns, late_ns = self._vm.msi_train(dest_apic_id, vector, count, int(gap_us * 1000))
        return MsiTrain(sent, elapsed_ns / 1e9, late_ns / 1e3)

    @renamed(timeout="timeout_s")
    def msi_ping(
        self,
        vcpu: Vcpu,
        program: Program,
        vector: int,
        count: int,
        gap_us: float,
        timeout_s: float = 30.0,
        halts_before: int = 0,
    ) -> np.ndarray:
        """Host → vCPU MSI ping-pong with a running ``wait_interrupts`` program.

        Each round waits until the guest announces its next halt (its ``halts``
        counter), waits ``gap_us`` more — the vCPU is halted: polling or
        blocked — then sends the MSI. Returns the ``count - 1`` round-trip
        times (ns, MSI sent → guest about to halt again), timed in Rust with
        the GIL released.

        Rounds are counted from ``halts_before``, the counter's value when the
        vCPU started the program (0, the default, for a freshly loaded one), so
        the vCPU thread may start before or after this call.

        ``count`` is at most [`MSI_PING_MAX_COUNT`][vcpulab.kvm.MSI_PING_MAX_COUNT]; ``gap_us`` at most the
        ``timeout_s`` (s). Ctrl-C, [`close`][vcpulab.kvm.Vm.close] and the timeout end it within ~20 ms,
        also in the middle of a gap (``KeyboardInterrupt``, ``ValueError``,
        ``TimeoutError``).
        """
        if not isinstance(vcpu, Vcpu) or vcpu.vm is not self:
            raise ValueError(f"msi_ping: vcpu must be a Vcpu of this VM, got {vcpu!r}")
        if not isinstance(program, Program):
            raise TypeError(f"msi_ping: program must be a Program, got {type(program).__name__}")
        _check_owner(program, self)
        if program.name != "wait_interrupts":
            raise ValueError(f"msi_ping drives a wait_interrupts program, got {program.name!r}")
        vector = check_int("vector", vector, 0, 255)
        count = check_int("count", count, 1, MSI_PING_MAX_COUNT)
        timeout_s = _timeout(timeout_s)
        gap_us = check_float("gap_us", gap_us, 0.0, timeout_s * 1e6, unit="µs (at most the timeout)")
        halts_before = check_int("halts_before", halts_before, 0, _U64)
        halts = next(r for r in program.results if r["name"] == "halts")
        counter = halts["gpa"] + 8 * vcpu.id
        return self._vm.msi_ping(vcpu.id, vector, count, int(gap_us * 1000), counter, timeout_s, halts_before)

    # observation ------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """VM binary stats (``KVM_GET_STATS_FD``): {name: int or histogram array}."""
        return self._vm.stats()

    def stats_schema(self) -> list[dict[str, Any]]:
        return [_schema_row(r) for r in self._vm.stats_schema()]

    def steal_times(self, vcpus: Sequence[Vcpu] | None = None) -> np.ndarray:
        """Steal-time snapshots of many vCPUs as a numpy structured array
        ([`STEAL_DTYPE`][vcpulab.kvm.STEAL_DTYPE]); memory reads only, no syscalls."""
        vcpus = self.vcpus if vcpus is None else vcpus
        if isinstance(vcpus, (str, bytes)) or not hasattr(vcpus, "__iter__"):
            raise TypeError(f"vcpus must be a sequence of Vcpu, got {type(vcpus).__name__}")
        gpas = []
        for v in vcpus:
            if not isinstance(v, Vcpu) or v.vm is not self:
                raise TypeError(f"vcpus must hold Vcpus of this VM, got {v!r}")
            g = v.steal_gpa
            if g is None:
                raise ValueError(f"steal time is not enabled on vCPU {v.id}")
            gpas.append(g)
        return np.frombuffer(self._vm.steal_times(gpas), dtype=STEAL_DTYPE).copy()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.vcpus)} vCPUs"
        return f"<Vm {self.memory_mib} MiB irqchip={self.irqchip} {state}>"

    def _repr_html_(self) -> str:
        from vcpulab._display import table

        rows: list[tuple[str, object]] = [("guest RAM", f"{self.memory_mib} MiB"), ("in-kernel irqchip", self.irqchip)]
        if self.closed:
            rows.append(("state", "closed"))
        else:
            rows += [
                ("vCPUs", ", ".join(str(v.id) for v in self.vcpus) or "none"),
                ("halt_poll_ns", self.halt_poll_ns),
                ("disabled exits", self.disabled_exits),
            ]
        return table("KVM VM", rows)


#: the segment registers of [`Sregs`][vcpulab.kvm.Sregs]
_SEGMENTS = ("cs", "ds", "es", "fs", "gs", "ss", "tr", "ldt")


def _gpa(gpa: int) -> int:
    if isinstance(gpa, int) and not isinstance(gpa, bool) and gpa < 0:
        raise IndexError(f"guest-physical address must be >= 0, got {gpa}")
    return check_int("gpa", gpa, 0, _U64)


def _nonneg(v: int, name: str) -> int:
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return v


def _check_owner(program: Program, vm: Vm) -> None:
    if not isinstance(program, Program):
        raise TypeError(f"expected a Program (from Vm.load), got {type(program).__name__}")
    if program.vm_id != vm._token:
        raise ValueError(f"program {program.name!r} was loaded into another VM; load it into this one")


def _schema_row(r: tuple[Any, ...]) -> dict[str, Any]:
    name, kind, unit, base, exponent, size, bucket = r
    return {
        "name": name,
        "type": kind,
        "unit": unit,
        "base": base,
        "exponent": exponent,
        "size": size,
        "bucket_size": bucket,
    }


# --------------------------------------------------------------------------- vCPU


@guard_panics
@fork_checked
class Vcpu(ForkSafe):
    """A vCPU (create with [`Vm.create_vcpu`][vcpulab.kvm.Vm.create_vcpu]). Thread-safe; runs release the GIL.

    Cannot be copied or pickled (``TypeError``), nor used in a child forked
    after it was created (``RuntimeError``: the parent's thread that may be
    running it does not exist there)."""

    def __init__(self, core: Any, vm: Vm) -> None:
        self._fork_init()
        self._vcpu = core
        self.vm = vm
        if type(self).run is Vcpu.run:
            # the per-exit path without a Python frame: the Rust method makes
            # run()'s checks and raises its errors (src/py/kvm.rs run_checked);
            # on this host's emulated guests about 5 % less CPU per IO exit
            # than through the method below
            self.__dict__["run"] = core.run

    @property
    def id(self) -> int:
        return self._vcpu.id

    # registers -------------------------------------------------------------------
    @property
    def regs(self) -> Regs:
        return Regs(**dict(self._vcpu.get_regs()))

    @regs.setter
    def regs(self, value: Regs | Mapping[str, int]) -> None:
        if not isinstance(value, (Regs, Mapping)):
            raise TypeError(
                f"regs must be a Regs or a mapping of register names to ints, got {type(value).__name__} {value!r}"
            )
        items = value.__dict__ if isinstance(value, Regs) else dict(value)
        self._vcpu.set_regs([(k, check_int(k, v, 0, _U64)) for k, v in items.items()])

    def set_regs(self, **values: int) -> None:
        """Update only the named registers: ``vcpu.set_regs(rip=..., rax=1)``."""
        self._vcpu.set_regs([(k, check_int(k, v, 0, _U64)) for k, v in values.items()])

    @property
    def sregs(self) -> Sregs:
        d = self._vcpu.get_sregs()
        segs: dict[str, Any] = {k: Segment(**d[k]) for k in ("cs", "ds", "es", "fs", "gs", "ss", "tr", "ldt")}
        return Sregs(**segs, **{k: d[k] for k in d if k not in segs})

    def set_sregs(self, **values: Any) -> None:
        """Update the named special registers: ``set_sregs(cr4=..., cs={"dpl": 0})``."""
        conv = {k: (v.__dict__ if isinstance(v, Segment) else v) for k, v in values.items()}
        for k, v in conv.items():
            if k in _SEGMENTS:
                if not isinstance(v, Mapping):
                    raise TypeError(f"{k} must be a Segment or a mapping of its fields, got {type(v).__name__} {v!r}")
                items: Iterable[tuple[Any, Any]] = v.items()
            elif k in ("gdt", "idt"):
                items = enumerate(check_seq(k, v, "(base, limit)"))
            else:
                items = [(None, v)]
            for f, x in items:
                check_int(k if f is None else f"{k}.{f}", x, 0, 15 if k == "cr8" else _U64)
        self._vcpu.set_sregs(conv)

    def get_msrs(self, indices: Iterable[int]) -> dict[int, int]:
        if isinstance(indices, Mapping):
            indices = list(indices)
        ids = [check_int("MSR index", i, 0, _U32) for i in check_seq("indices", indices, "MSR indices")]
        return dict(self._vcpu.get_msrs(ids))

    def set_msrs(self, values: Mapping[int, int]) -> None:
        if not isinstance(values, Mapping):
            raise TypeError(f"values must map MSR indices to values, got {type(values).__name__} {values!r}")
        self._vcpu.set_msrs(
            [
                (check_int("MSR index", i, 0, _U32), check_int(f"value of MSR {i:#x}", v, 0, _U64))
                for i, v in values.items()
            ]
        )

    def get_msr(self, index: int) -> int:
        index = check_int("MSR index", index, 0, _U32)
        return self.get_msrs([index])[index]

    def set_msr(self, index: int, value: int) -> None:
        self.set_msrs({check_int("MSR index", index, 0, _U32): value})

    @property
    def cpuid(self) -> list[CpuidEntry]:
        """This vCPU's CPUID table (``KVM_GET_CPUID2``), including the KVM leaves."""
        return [CpuidEntry(*e) for e in self._vcpu.cpuid()]

    @property
    def kvm_pv_features(self) -> dict[str, bool]:
        """The KVM PV feature bits this vCPU's CPUID (leaf 0x40000001) offers the guest."""
        eax = next((e.eax for e in self.cpuid if e.function == 0x4000_0001), 0)
        names = dict(self.vm.host._host.pv_features())
        bits = {n: b for n, b in _PV_BITS.items() if n in names}
        return {n: bool(eax & (1 << b)) for n, b in bits.items()}

    @property
    def tsc_khz(self) -> int:
        """TSC frequency of this vCPU (``KVM_GET_TSC_KHZ``)."""
        return self._vcpu.tsc_khz()

    @property
    def mp_state(self) -> int:
        return self._vcpu.mp_state()

    @property
    def io_in_value(self) -> int:
        """What the guest's ``in`` instructions read (default 0)."""
        return self._vcpu.io_in_value

    @io_in_value.setter
    def io_in_value(self, v: int) -> None:
        self._vcpu.io_in_value = check_int("io_in_value", v, 0, _U64)

    @property
    def mmio_read_value(self) -> int:
        """What the guest's MMIO reads outside RAM return (default 0)."""
        return self._vcpu.mmio_read_value

    @mmio_read_value.setter
    def mmio_read_value(self, v: int) -> None:
        self._vcpu.mmio_read_value = check_int("mmio_read_value", v, 0, _U64)

    # running ----------------------------------------------------------------------------
    def start(self, program: Program | int) -> None:
        """Point the vCPU at a loaded program (or an entry gpa): fresh stack, rdi = id."""
        if isinstance(program, Program):
            _check_owner(program, self.vm)
            entry = program.entry
        else:
            entry = _gpa(program)
        self._vcpu.start(entry)

    @checks_inline
    def run(self, timeout_s: float = 10.0, *, timeout: float | None = None) -> Exit:
        """One ``KVM_RUN`` (GIL released). At the deadline (``timeout_s`` s) the vCPU
        is forced out and the exit's kind is ``'interrupted'``. ``timeout`` is the
        deprecated name of ``timeout_s`` (a DeprecationWarning).

        The per-exit path: an instance's ``run`` is the extension's
        ``Vcpu.run`` (src/py/kvm.rs ``run_checked``), which makes these same
        checks (fork, timeout, the former argument name) and raises the same
        errors without a Python frame; this method is what a subclass that
        overrides ``run`` gets, and the reference for both. The Rust side turns a panic into RuntimeError
        and returns the exit as a Rust object, so a Python loop over ``run()``
        stays close to a Rust loop (benches/bench_kvm.py)."""
        if self._fork_gen != _checks._fork_generation:
            self._check_process()
        if timeout is not None:
            timeout_s = _checks.former_name("run", "timeout", "timeout_s", timeout, timeout_s, 10.0)
        if type(timeout_s) not in (float, int) or not 0 < timeout_s <= MAX_TIMEOUT_S:
            timeout_s = _timeout(timeout_s)  # the named TypeError/ValueError
        return self._vcpu.run_raw(timeout_s)

    @renamed(timeout="timeout_s")
    def run_until(
        self, kind: str | Sequence[str], count: int = 1, port: int | None = None, timeout_s: float = 10.0
    ) -> RunResult:
        """Run (looping in Rust, GIL released) until ``count`` exits of ``kind``.

        ``kind`` is an exit kind or a list of them, or ``"ucall"`` (a SYNC or
        DONE message from the guest). Other exits are resumed. Raises
        ``TimeoutError`` at the deadline, [`GuestAssertionError`][vcpulab.GuestAssertionError] when the
        guest reports a failed assertion, [`UnexpectedExitError`][vcpulab.UnexpectedExitError] for a
        fatal exit that was not asked for (naming both), ``KeyboardInterrupt``
        on Ctrl-C. A [`kick`][vcpulab.kvm.Vcpu.kick] returns early with ``interrupted=True``.
        """
        kinds = [kind] if isinstance(kind, str) else check_seq("kind", kind, "exit kinds")
        if not kinds:
            raise ValueError("kind must name at least one exit kind (or 'ucall'), got an empty list")
        for k in kinds:
            if not isinstance(k, str):
                raise TypeError(f"kind must be a str or a list of str, got {type(k).__name__} {k!r}")
        count = check_int("count", count, 1, _U64)
        if port is not None:
            port = check_int("port", port, 0, 0xFFFF)
        timeout_s = _timeout(timeout_s)
        t0 = time.perf_counter()
        d = self._vcpu.run_until(kinds, count, port, timeout_s)
        return RunResult(
            exit=d["exit"],
            ucall=d["ucall"],
            matches=d["matches"],
            exits=d["exits"],
            interrupted=d["interrupted"],
            wall_s=time.perf_counter() - t0,
        )

    @renamed(timeout="timeout_s")
    def run_program(self, timeout_s: float = 10.0) -> list[int]:
        """Run the started program until it says DONE (at most ``timeout_s``
        s); returns the values of the SYNC messages it sent on the way. Guest
        assertions raise."""
        timeout_s = _timeout(timeout_s)
        deadline = time.monotonic() + timeout_s
        syncs: list[int] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"vCPU {self.id}: program did not finish within {timeout_s} s")
            r = self.run_until("ucall", timeout_s=left)
            if r.interrupted:
                raise InterruptedError(f"vCPU {self.id} was kicked before its program finished")
            assert r.ucall is not None
            if r.ucall[0] == "done":
                return syncs
            syncs.append(r.ucall[1])

    def kick(self) -> bool:
        """Force the vCPU out of ``KVM_RUN`` if a thread is running it."""
        return self._vcpu.kick()

    # pv fields ---------------------------------------------------------------------------
    def enable_steal_time(self, gpa: int | None = None) -> int:
        """Register a steal-time area (``MSR_KVM_STEAL_TIME = gpa | 1``).

        ``gpa`` must be 64-byte aligned and inside RAM; by default each vCPU id
        gets its own slot in the layout's steal area. Returns the gpa.
        """
        return self._vcpu.enable_steal_time(None if gpa is None else _gpa(gpa))

    @property
    def steal_gpa(self) -> int | None:
        return self._vcpu.steal_gpa

    @property
    def steal_time(self) -> StealTime:
        """A consistent snapshot (version protocol: retried while odd or changed)."""
        return StealTime(*self._vcpu.steal_time())

    # stats -------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """vCPU binary stats: {name: int or histogram array} (one ``pread``)."""
        return self._vcpu.stats()

    def stats_schema(self) -> list[dict[str, Any]]:
        """Descriptors: name, type, unit, base, exponent, size, bucket_size."""
        return [_schema_row(r) for r in self._vcpu.stats_schema()]

    def __repr__(self) -> str:
        return f"<Vcpu {self.id}>"


#: KVM_FEATURE_* bit numbers of CPUID 0x40000001 by name (from ``src/kvm/system.rs``).
_PV_BITS: dict[str, int] = dict(_core.PV_FEATURE_BITS)


def sample_stats(vcpus: Sequence[Vcpu], t_ns: int | None = None) -> Any:
    """One row per vCPU with every scalar vCPU stat as a column (a polars DataFrame).

    Costs one ``pread`` per vCPU. ``t_ns`` defaults to ``time.monotonic_ns()``.
    """
    import polars as pl

    t = time.monotonic_ns() if t_ns is None else t_ns
    rows: dict[str, list[int]] = {"t_ns": [], "vcpu": []}
    names: list[str] | None = None
    for v in vcpus:
        n, vals = v._vcpu.stats_scalars()
        if names is None:
            names = list(n)
            for k in names:
                rows[k] = []
        rows["t_ns"].append(t)
        rows["vcpu"].append(v.id)
        for k, x in zip(names, vals.tolist()):
            rows[k].append(x)
    schema: dict[str, Any] = {k: pl.UInt64 for k in rows}
    schema["t_ns"] = pl.Int64
    schema["vcpu"] = pl.Int64  # key columns are Int64 in every frame (vcpulab._frames)
    return pl.DataFrame(rows, schema=schema)


# Watching VMs vcpulab did not start (kept in its own module; see vcpulab/_attach.py).
from vcpulab._attach import Attached, attach  # noqa: E402
