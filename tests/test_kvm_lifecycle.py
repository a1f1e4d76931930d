"""Deadlines, kicks, Ctrl-C, closing, leaks and bad input against real KVM."""

from __future__ import annotations

import gc
import os
import textwrap
import time

import pytest
from conftest import PinnedThread, interrupt_script

import vcpulab
from vcpulab.kvm import Host


def test_endless_loop_stops_at_its_deadline_and_the_vcpu_still_works(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        spin = vm.load("endless_loop")
        vcpu = vm.create_vcpu(0)
        vcpu.start(spin)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="within 0.200 s"):
            vcpu.run_until("hlt", timeout_s=0.2)
        assert time.monotonic() - t0 < 1.0
        # one KVM_RUN with a deadline returns an 'interrupted' exit instead
        t0 = time.monotonic()
        assert vcpu.run(timeout_s=0.1).kind == "interrupted"
        assert 0.09 < time.monotonic() - t0 < 1.0
        # usable afterwards
        prog = vm.load("pause_loop", iterations=100)
        vcpu.start(prog)
        vcpu.run_program(timeout_s=5)
        assert vm.results(prog)["counter"][0] == 100


def test_kick_from_another_thread_returns_early(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        vcpu = vm.create_vcpu(0)
        vcpu.start(vm.load("endless_loop"))
        t = PinnedThread(lambda: vcpu.run_until("hlt", timeout_s=20), set(os.sched_getaffinity(0)))
        t.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        while not vcpu.kick():  # the thread may not have entered KVM_RUN yet
            time.sleep(0.01)
        r = t.value(timeout=5)
        assert r.interrupted and r.exit.kind == "interrupted"
        assert time.monotonic() - t0 < 1.0


def test_closing_a_vm_kicks_its_running_vcpus(kvm_host: Host) -> None:
    vm = kvm_host.create_vm(memory_mib=4)
    vcpu = vm.create_vcpu(0)
    vcpu.start(vm.load("endless_loop"))
    t = PinnedThread(lambda: vcpu.run_until("hlt", timeout_s=20), set(os.sched_getaffinity(0)))
    t.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    vm.close()
    r = t.value(timeout=5)
    assert r.interrupted
    assert time.monotonic() - t0 < 1.0
    with pytest.raises(ValueError, match="closed"):
        vcpu.run(timeout_s=1)


def test_ctrl_c_interrupts_a_run_promptly(kvm_host: Host) -> None:
    code = textwrap.dedent(
        """
        import time
        from vcpulab.kvm import Host
        vm = Host().create_vm(memory_mib=4)
        v = vm.create_vcpu(0)
        v.start(vm.load("endless_loop"))
        print("ready", flush=True)
        t0 = time.monotonic()
        try:
            v.run_until("hlt", timeout_s=30)
        except KeyboardInterrupt:
            print(f"interrupted after {time.monotonic() - t0:.3f}", flush=True)
            vm.close()
        """
    )
    assert "interrupted after" in interrupt_script(code)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _kvm_run_maps() -> int:
    """Each vCPU's kvm_run mapping: a named VMA (anon_inode:kvm-vcpu:N) the
    kernel never merges with its neighbours."""
    with open("/proc/self/maps") as f:
        return sum(1 for m in f if "anon_inode:kvm" in m)


def _vm_size_mib() -> float:
    """The process's mapped bytes (VmSize): guest RAM counts here even when the
    kernel merges its mapping with an adjacent anonymous one."""
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    return kib / 1024


GUEST_MIB = 16


def test_200_vms_leave_no_fd_or_mapping_behind(kvm_host: Host) -> None:
    def cycle() -> None:
        with kvm_host.create_vm(memory_mib=GUEST_MIB) as vm:
            v = vm.create_vcpu(0)
            v.enable_steal_time()
            v.stats()
            vm.stats()
            _ = vm.memory  # a numpy view, dropped at once

    cycle()  # warm-up: lazily created process-wide state (signal handler, stubs)
    # objects of earlier tests that only the cycle collector frees (a Host in a
    # reference cycle holds /dev/kvm) must not close their fds in the middle
    gc.collect()
    fds, runs, size = _fds(), _kvm_run_maps(), _vm_size_mib()
    with kvm_host.create_vm(memory_mib=GUEST_MIB) as vm:
        vm.create_vcpu(0)
        # the probes see one VM: its vCPU's kvm_run and its RAM
        assert _kvm_run_maps() == runs + 1
        assert _vm_size_mib() >= size + GUEST_MIB
    for _ in range(200):
        cycle()
    assert _fds() == fds
    assert _kvm_run_maps() == runs
    # a leaked RAM mapping would add 200 x 16 MiB; the allocator moves a few MiB
    assert _vm_size_mib() - size < 64, (size, _vm_size_mib())


def test_a_numpy_view_keeps_guest_ram_alive_after_close(kvm_host: Host) -> None:
    vm = kvm_host.create_vm(memory_mib=2)
    view = vm.memory
    vm.write(0x200000 - 8, b"\x01" * 8)
    vm.close()
    assert view[-1] == 1  # still mapped: no use-after-free
    view[0] = 5


def test_exception_inside_with_still_closes(kvm_host: Host) -> None:
    with pytest.raises(RuntimeError):
        with kvm_host.create_vm(memory_mib=2) as vm:
            raise RuntimeError("boom")
    assert vm.closed


# ------------------------------------------------------------------ bad input


def test_bad_memory_sizes(kvm_host: Host) -> None:
    with pytest.raises(ValueError, match="memory_mib must be positive"):
        kvm_host.create_vm(memory_mib=0)
    with pytest.raises(ValueError, match="memory_mib must be at least 2"):
        kvm_host.create_vm(memory_mib=1)
    with pytest.raises(ValueError, match="memory_mib"):
        kvm_host.create_vm(memory_mib=10**7)  # beyond this host's RAM
    with pytest.raises(TypeError):
        kvm_host.create_vm(memory_mib=1.5)  # type: ignore[arg-type]


def test_bad_vcpu_ids(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        vm.create_vcpu(0)
        with pytest.raises(ValueError, match="already exists"):
            vm.create_vcpu(0)
        with pytest.raises(IndexError, match="out of range"):
            vm.create_vcpu(kvm_host.max_vcpu_id)
        with pytest.raises(ValueError, match="too small for vCPU id 1000"):
            vm.create_vcpu(1000)  # its stack would lie beyond 4 MiB of RAM
        with pytest.raises(IndexError, match=">= 0"):
            vm.create_vcpu(-1)


def test_bad_steal_time_addresses(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        v = vm.create_vcpu(0)
        with pytest.raises(ValueError, match="64-byte aligned"):
            v.enable_steal_time(0x50010)
        with pytest.raises(IndexError, match="outside guest RAM"):
            v.enable_steal_time(4 << 20)
        with pytest.raises(ValueError, match="not enabled"):
            _ = v.steal_time
        assert v.enable_steal_time(0x50000) == 0x50000


def test_out_of_ram_access(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=2) as vm:
        size = 2 << 20
        assert vm.read(size - 4, 4) == b"\0\0\0\0"
        with pytest.raises(IndexError, match="outside guest RAM"):
            vm.read(size - 4, 5)
        with pytest.raises(IndexError):
            vm.write(size, b"x")
        with pytest.raises(IndexError):
            vm.read_u64(2**64 - 1)
        with pytest.raises(IndexError, match=">= 0"):
            vm.read(-8, 4)
        with pytest.raises(ValueError, match="n must be >= 0"):
            vm.read(0, -1)
        with pytest.raises(ValueError, match="u64"):
            vm.write_u64(0, -1)


def test_a_program_belongs_to_its_vm(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=2) as a, kvm_host.create_vm(memory_mib=2) as b:
        prog = a.load("pause_loop", iterations=1)
        v = b.create_vcpu(0)
        with pytest.raises(ValueError, match="another VM"):
            v.start(prog)
        with pytest.raises(ValueError, match="another VM"):
            b.results(prog)
        with pytest.raises(ValueError, match="must be >= 0"):
            a.load("pause_loop", iterations=-1)


def test_use_after_close(kvm_host: Host) -> None:
    vm = kvm_host.create_vm(memory_mib=2)
    v = vm.create_vcpu(0)
    vm.close()
    vm.close()  # idempotent
    for call in (
        lambda: vm.read(0, 1),
        lambda: vm.memory,
        lambda: vm.create_vcpu(1),
        lambda: vm.stats(),
        lambda: v.regs,
        lambda: v.run(timeout_s=0.1),
        lambda: vm.send_msi(0, 40),
    ):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_bad_program_and_run_arguments(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=2, irqchip=False) as vm:
        with pytest.raises(ValueError, match="unknown guest program"):
            vm.load("nope")
        with pytest.raises(ValueError, match="unknown parameter"):
            vm.load("halt", port=1)
        with pytest.raises(ValueError, match="missing parameter"):
            vm.load("io_out", port=1)
        with pytest.raises(ValueError, match="size must be one of"):
            vm.load("io_out", port=1, value=1, size=3)
        with pytest.raises(vcpulab.UnsupportedError, match="irqchip"):
            vm.load("wait_interrupts", vector=40, count=1)
        v = vm.create_vcpu(0)
        with pytest.raises(ValueError, match="timeout"):
            v.run(timeout_s=0)
        with pytest.raises(ValueError, match="timeout"):
            v.run(timeout_s=float("inf"))
        with pytest.raises(ValueError, match="unknown exit kind"):
            v.run_until("hltt", timeout_s=1)
        with pytest.raises(ValueError, match="unknown register"):
            v.set_regs(rxx=1)
        with pytest.raises(vcpulab.UnsupportedError, match="irqchip"):
            vm.send_msi(0, 40)
        with pytest.raises(ValueError, match="cannot disable exits|before any vCPU"):
            vm.disable_exits(pause=True)


def test_msi_arguments_are_checked(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=2) as vm:
        vm.create_vcpu(0)
        with pytest.raises(ValueError, match="vector must be 32..=255"):
            vm.send_msi(0, 3)
        with pytest.raises(ValueError, match="destination"):
            vm.send_msi(300, 40)


def test_ctrl_c_interrupts_a_long_msi_train(kvm_host: Host) -> None:
    code = textwrap.dedent(
        """
        import time
        from vcpulab.kvm import Host
        vm = Host().create_vm(memory_mib=4)
        v = vm.create_vcpu(0)
        v.start(vm.load("wait_interrupts", vector=40, count=10**9))
        v.run(timeout_s=0.05)  # the guest enables its LAPIC, then halts
        print("ready", flush=True)
        t0 = time.monotonic()
        try:
            vm.msi_train(0, 40, count=10**9, gap_us=10)
        except KeyboardInterrupt:
            print(f"interrupted after {time.monotonic() - t0:.3f}", flush=True)
        """
    )
    assert "interrupted after" in interrupt_script(code)


def test_a_thread_timer_left_armed_by_a_short_run_cuts_no_later_run_short(kvm_host: Host) -> None:
    """Each thread keeps one deadline timer, left armed between runs (kick.rs):
    a run with a later deadline than the one still armed gets the early fire
    and runs on to its own deadline; a stray fire after the last run is
    harmless (SA_RESTART, and Python retries interrupted sleeps)."""
    with kvm_host.create_vm(memory_mib=4, irqchip=False) as vm:
        io = vm.load("io_loop", port=0x80, count=1000)
        spin = vm.load("endless_loop")
        vcpu = vm.create_vcpu(0)
        vcpu.start(io)
        assert vcpu.run(timeout_s=0.2).kind == "io"  # returns at once; the timer stays set for +0.2 s
        vcpu.start(spin)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="within 0.600 s"):
            vcpu.run_until("hlt", timeout_s=0.6)
        assert 0.55 < time.monotonic() - t0 < 1.5
        # the same through one KVM_RUN: the early fire is not an 'interrupted' exit
        vcpu.start(io)
        assert vcpu.run(timeout_s=0.1).kind == "io"
        vcpu.start(spin)
        t0 = time.monotonic()
        assert vcpu.run(timeout_s=0.4).kind == "interrupted"
        assert 0.35 < time.monotonic() - t0 < 1.5

        # a kick still ends a run whose timer fired early before it
        def early_then_long():  # type: ignore[no-untyped-def]
            vcpu.start(io)
            assert vcpu.run(timeout_s=0.05).kind == "io"  # this thread's timer: +0.05 s
            vcpu.start(spin)
            return vcpu.run_until("hlt", timeout_s=20)

        t = PinnedThread(early_then_long, set(os.sched_getaffinity(0)))
        t.start()
        time.sleep(0.3)
        while not vcpu.kick():
            time.sleep(0.01)
        r = t.value(timeout=5)
        assert r.interrupted and r.wall_s < 5
        # a fire after the last run lands in this thread while it sleeps
        assert vcpu.run(timeout_s=0.05).kind == "interrupted"
        vcpu.start(io)
        assert vcpu.run(timeout_s=0.1).kind == "io"
        t0 = time.monotonic()
        time.sleep(0.3)
        assert time.monotonic() - t0 >= 0.3
