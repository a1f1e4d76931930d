"""Type stubs of the Rust extension (src/py). The Pythonic API is in vcpulab.kvm / vcpulab.sim."""

from collections.abc import Callable
from typing import Any, final

import numpy as np
import numpy.typing as npt

__version__: str
"""vcpulab's version (``vcpulab --version`` adds the git build and the dependencies)."""
__build__: str
SIM_VCPU_TIME_CATEGORIES: list[str]
SIM_PCPU_TIME_CATEGORIES: list[str]
GUEST_PROGRAMS: list[tuple[str, list[str], str]]
EXIT_KINDS: list[str]
SCHED_WHY: list[str]
PV_FEATURE_BITS: list[tuple[str, int]]
DISABLE_EXITS_BITS: list[tuple[str, int]]
__all__ = [
    "DISABLE_EXITS_BITS",
    "Exit",
    "EXIT_KINDS",
    "SCHED_WHY",
    "ForeignProcess",
    "ForeignStats",
    "GUEST_PROGRAMS",
    "GuestAssertionError",
    "Host",
    "IRQ_COUNTS_ADDR",
    "KvmIoctlError",
    "KvmUnavailableError",
    "MAX_MEMORY_MIB",
    "MAX_PROGRAM_ROUNDS",
    "PV_HALT_PORT",
    "PV_SPIN_PORT",
    "MSR_KVM_STEAL_TIME",
    "PV_FEATURE_BITS",
    "SIM_PCPU_TIME_CATEGORIES",
    "SIM_VCPU_TIME_CATEGORIES",
    "STEAL_AREA_ADDR",
    "STEAL_OFF_IS_IDLE",
    "STEAL_OFF_PREEMPTED",
    "Spinner",
    "TRACE_DEFAULT_BUFFER_BYTES",
    "TRACE_DEFAULT_MAX_EVENTS",
    "TRACE_EVENTS",
    "TRACE_NULL",
    "TRACE_RUN_LOOP_REPLACES",
    "TraceUnavailableError",
    "Tracer",
    "UCALL_PORT",
    "UnexpectedExitError",
    "UnsupportedError",
    "Vcpu",
    "VcpuView",
    "VcpulabError",
    "Vm",
    "__build__",
    "__version__",
    "allowed_cpus",
    "halt_poll_policies",
    "halt_poll_simulate",
    "halt_poll_simulate_many",
    "halt_poll_windows",
    "monotonic_ns",
    "mount_pseudo_fs",
    "mounted_pseudo_fs",
    "run_experiment",
    "sim_config_schema",
    "sim_default_config",
    "sim_run",
    "sim_sweep",
    "sim_validate",
]
UCALL_PORT: int
IRQ_COUNTS_ADDR: int
MAX_MEMORY_MIB: int
MAX_PROGRAM_ROUNDS: int
PV_SPIN_PORT: int
PV_HALT_PORT: int
MSR_KVM_STEAL_TIME: int

class VcpulabError(Exception):
    """Base class of vcpulab's own exceptions."""

class KvmUnavailableError(VcpulabError):
    """/dev/kvm is missing or cannot be opened; the message says why and how to fix it."""

class KvmIoctlError(VcpulabError):
    """A KVM ioctl failed; the message names the ioctl and the errno."""

class GuestAssertionError(VcpulabError):
    """A guest program reported a failed assertion through the ucall port; the message names where it was written."""

class UnexpectedExitError(VcpulabError):
    """The vCPU stopped in a way the caller did not ask for (a triple fault, a guest exception, a finished program…)."""

class UnsupportedError(VcpulabError):
    """This host (or this VM's configuration) lacks a feature the operation needs."""

class TraceUnavailableError(VcpulabError):
    """Kernel tracing cannot be used here (tracefs absent and not mountable, or a tracepoint missing)."""

_CpuidRow = tuple[int, int, int, int, int, int, int]
_SchemaRow = tuple[str, str, str, int, int, int, int]

@final
class Host:
    def __new__(cls, path: str = "/dev/kvm") -> Host: ...
    @property
    def api_version(self) -> int: ...
    @property
    def max_vcpus(self) -> int: ...
    @property
    def max_vcpu_id(self) -> int: ...
    @property
    def pv_feature_bits(self) -> int: ...
    def capabilities(self) -> list[tuple[str, int, int]]: ...
    def check_extension(self, cap: int) -> int: ...
    def pv_features(self) -> list[tuple[str, bool]]: ...
    def supported_cpuid(self) -> list[_CpuidRow]: ...
    def create_vm(self, memory_mib: int, irqchip: bool) -> Vm: ...

@final
class Vm:
    irqchip: bool
    memory_bytes: int
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def memory(self) -> npt.NDArray[np.uint8]: ...
    def read(self, gpa: int, n: int) -> bytes: ...
    def write(self, gpa: int, data: bytes) -> None: ...
    def read_u64(self, gpa: int) -> int: ...
    def write_u64(self, gpa: int, value: int) -> None: ...
    def write_u8(self, gpa: int, value: int) -> None: ...
    def load(self, name: str, **params: int) -> dict[str, Any]: ...
    def create_vcpu(self, id: int) -> Vcpu: ...
    def vcpu_ids(self) -> list[int]: ...
    def set_halt_poll_ns(self, ns: int) -> None: ...
    def halt_poll_override(self) -> int | None: ...
    def allowed_disable_exits(self) -> int: ...
    def disable_exits(self, bits: int) -> None: ...
    def disabled_exits(self) -> int: ...
    def send_msi(self, dest: int, vector: int) -> None: ...
    def msi_train(self, dest: int, vector: int, count: int, gap_ns: int) -> tuple[int, int, int]: ...
    def msi_ping(
        self,
        dest: int,
        vector: int,
        count: int,
        gap_ns: int,
        counter_gpa: int,
        timeout: float = 30.0,
        halts_before: int = 0,
    ) -> npt.NDArray[np.uint64]: ...
    def stats(self) -> dict[str, Any]: ...
    def stats_schema(self) -> list[_SchemaRow]: ...
    def steal_times(self, gpas: list[int]) -> bytes: ...

@final
class Exit:
    kind: str
    port: int | None
    size: int | None
    count: int | None
    direction: str | None
    data: int | None
    data_bytes: bytes | None
    address: int | None
    length: int | None
    is_write: bool | None
    suberror: int | None
    internal_data: list[int] | None
    reason: int | None
    cpu: int | None
    name: str | None
    event_type: int | None
    event_data: list[int] | None
    __match_args__: tuple[str]
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class Vcpu:
    id: int
    io_in_value: int
    mmio_read_value: int
    @property
    def steal_gpa(self) -> int | None: ...
    def get_regs(self) -> list[tuple[str, int]]: ...
    def set_regs(self, values: list[tuple[str, int]]) -> None: ...
    def get_sregs(self) -> dict[str, Any]: ...
    def set_sregs(self, values: dict[str, Any]) -> None: ...
    def get_msrs(self, indices: list[int]) -> list[tuple[int, int]]: ...
    def set_msrs(self, values: list[tuple[int, int]]) -> None: ...
    def cpuid(self) -> list[_CpuidRow]: ...
    def tsc_khz(self) -> int: ...
    def mp_state(self) -> int: ...
    def start(self, entry: int) -> None: ...
    def enable_steal_time(self, gpa: int | None = None) -> int: ...
    def steal_time(self) -> tuple[int, int, int, int, int]: ...
    def stats(self) -> dict[str, Any]: ...
    def stats_scalars(self) -> tuple[list[str], npt.NDArray[np.uint64]]: ...
    def stats_schema(self) -> list[_SchemaRow]: ...
    def run_raw(self, timeout: float = 10.0) -> Exit: ...
    def run(self, timeout_s: float = 10.0, *, timeout: float | None = None) -> Exit: ...
    def run_until(
        self, kinds: list[str], count: int = 1, port: int | None = None, timeout: float = 10.0
    ) -> dict[str, Any]: ...
    def kick(self) -> bool: ...

# ----------------------------------------------------------------- experiments (src/py/kvm.rs)

def run_experiment(
    plan: list[tuple[Vcpu, int, list[int]]],
    duration: float,
    sample_every: float | None = None,
    poll_every: float = 0.05,
    scheduler: dict[str, Any] | None = None,
) -> dict[str, Any]: ...
def allowed_cpus() -> list[int]: ...

# ----------------------------------------------------------------- another process, mounts (src/py/attach.rs)

@final
class ForeignProcess:
    def __new__(cls, pid: int) -> ForeignProcess: ...
    @property
    def pid(self) -> int: ...
    def wait_exited(self, timeout_s: float = 0.0) -> bool: ...
    def take_stats_fd(self, fd: int) -> ForeignStats: ...
    def close(self) -> None: ...

@final
class ForeignStats:
    @property
    def target_fd(self) -> int: ...
    @property
    def vcpu(self) -> int | None: ...
    @property
    def id(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def read(self) -> dict[str, Any]: ...
    def held(self) -> bool | None: ...
    def close(self) -> None: ...

def mount_pseudo_fs(kind: str) -> bool: ...
def mounted_pseudo_fs() -> list[tuple[str, str]]: ...

STEAL_AREA_ADDR: int
#: offsets in a vCPU's steal-time area of the ``preempted`` byte and the 2021 proposal's ``is_idle``
STEAL_OFF_PREEMPTED: int
STEAL_OFF_IS_IDLE: int

# ----------------------------------------------------------------- tracing (src/py/trace.rs)

TRACE_EVENTS: list[str]
TRACE_RUN_LOOP_REPLACES: list[str]
TRACE_NULL: int
TRACE_DEFAULT_MAX_EVENTS: int
TRACE_DEFAULT_BUFFER_BYTES: int

@final
class Tracer:
    def __new__(
        cls,
        cpus: list[int],
        max_events: int = ...,
        buffer_bytes: int = ...,
        kvm_pid: int | None = None,
        kvm_events: bool = True,
        vcpus: list[Vcpu] | None = None,
    ) -> Tracer: ...
    @property
    def running(self) -> bool: ...
    def stop(self) -> dict[str, Any]: ...
    def frames(self, start_ns: int, end_ns: int, vcpus: list[tuple[int, int, int]]) -> dict[str, Any]: ...
    def close(self) -> None: ...

def monotonic_ns() -> int: ...

# ----------------------------------------------------------------- simulator (src/py/sim.rs)

@final
class VcpuView:
    """What a Python policy sees of one vCPU ([K1]).

    A directed-yield policy written in Python (`vcpulab.sim.policies.python`)
    is called as ``f(spinner, candidates)``: ``candidates`` are the other
    vCPUs of the spinner's VM as these views, in the round-robin order the
    kernel's ``kvm_vcpu_on_spin()`` scans them. A view is a snapshot, frozen
    at the moment of the call; the fields are the kernel's flags of
    ``struct kvm_vcpu`` as the simulator keeps them.
    """

    index: int
    """Index of the vCPU in its VM."""
    running: bool
    """On a host CPU (in guest mode or in an exit handler)."""
    in_guest: bool
    """Running in guest mode (PF_VCPU)."""
    preempted: bool
    """vcpu->preempted. Set when the host scheduler took the CPU from the vCPU
    thread while it was runnable (``kvm_sched_out``)."""
    ready: bool
    """vcpu->ready. Runnable but not running: a yield_to candidate."""
    blocking: bool
    """kvm_vcpu_is_blocking(). Halted in ``kvm_vcpu_block``."""
    dy_runnable: bool
    """vcpu_dy_runnable(): kicked (pv_unhalted) or posted interrupt pending."""
    pending_interrupt: bool
    """kvm_arch_dy_has_pending_interrupt()."""
    in_spin_loop: bool
    """spin_loop.in_spin_loop. The vCPU is itself in a pause-loop exit."""
    dy_eligible: bool
    """spin_loop.dy_eligible (as kept by the engine for built-in policies)."""
    preempted_in_kernel: bool
    """arch.preempted_in_kernel. It was preempted while running guest kernel code."""
    st_preempted: bool
    """Steal-time preempted byte as the guest sees it."""
    steal_ns: int
    """Published steal time, ns."""
    pcpu_is_idle: bool
    """pcpu_is_idle: nothing else on the host CPU it last ran on."""
    ple_window: int
    """Current PLE window, cycles."""

@final
class Spinner:
    """The spinning vCPU, as passed to a Python policy.

    The first argument of ``f(spinner, candidates)``: the vCPU that took a
    pause-loop exit and looks for a vCPU to yield to. ``f`` returns a
    candidate's `VcpuView.index` to try ``yield_to`` on it, or None to stop;
    it is called again within the same exit after a failed try (see
    ``attempts``).
    """

    index: int
    """Index of the spinning vCPU."""
    vm: int
    """Index of its VM in the run (VMs of a `count > 1` entry are distinct)."""
    n_vcpus: int
    """Number of vCPUs of the VM."""
    last_boosted: int
    """kvm->last_boosted_vcpu."""
    in_kernel: bool
    """yield_to_kernel_mode."""
    attempts: list[tuple[int, int]]
    """(index, result) of each yield_to already tried in this exit."""
    waited_for: int | None
    """Ground truth (oracle only; no kernel knows it): the vCPU it waits for."""
    state: VcpuView
    """The spinner's own state."""

def sim_validate(config_json: str) -> str: ...
def sim_run(
    config_json: str,
    policies: dict[str, Any] | None = None,
    should_stop: Callable[[], bool] | None = None,
    trace_max_rows: int | None = None,
) -> dict[str, Any]: ...
def sim_sweep(
    config_jsons: list[str],
    policies: list[dict[str, Any] | None] | None = None,
    threads: int = 0,
    progress: Any = None,
    trace_max_rows: int | None = None,
) -> list[dict[str, Any]]: ...
def sim_default_config() -> str: ...
def sim_config_schema() -> str: ...

# ----------------------------------------------------------------- halt polling (src/py/halt_poll.rs)

def halt_poll_simulate(scenario_json: str) -> dict[str, Any]: ...
def halt_poll_simulate_many(scenarios_json: list[str]) -> list[dict[str, Any]]: ...
def halt_poll_windows(config_json: str, halts: list[tuple[int, bool]]) -> list[int]: ...
def halt_poll_policies() -> list[str]: ...
