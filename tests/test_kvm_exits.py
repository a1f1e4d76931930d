"""Exit decoding against real KVM: IO, MMIO, HLT, shutdown, guest assertions."""

from __future__ import annotations

import pytest

import vcpulab
from vcpulab.kvm import Host


@pytest.mark.parametrize("size,value", [(1, 0x5A), (2, 0xBEEF), (4, 0x1234_5678)])
def test_io_out_exit_carries_port_size_direction_and_data(kvm_host: Host, size: int, value: int) -> None:
    with kvm_host.create_vm(memory_mib=4, irqchip=False) as vm:
        prog = vm.load("io_out", port=0x3F8, value=value, size=size)
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        e = vcpu.run(timeout_s=2)
        assert e.kind == "io"
        assert (e.port, e.size, e.direction, e.data) == (0x3F8, size, "out", value)
        assert e.data_bytes == value.to_bytes(size, "little")
        # the program then halts; without an irqchip that is a HLT exit to user space
        assert vcpu.run(timeout_s=2).kind == "hlt"


def test_io_in_exit_returns_the_hosts_value_to_the_guest(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4, irqchip=False) as vm:
        prog = vm.load("io_in", port=0x71, size=2)
        vcpu = vm.create_vcpu(0)
        vcpu.io_in_value = 0xCAFE
        vcpu.start(prog)
        e = vcpu.run(timeout_s=2)
        assert (e.kind, e.port, e.size, e.direction) == ("io", 0x71, 2, "in")
        vcpu.run_program(timeout_s=2)
        assert vm.results(prog)["value"][0] == 0xCAFE


@pytest.mark.parametrize("size", [1, 2, 4, 8])
def test_mmio_write_exit_outside_ram(kvm_host: Host, size: int) -> None:
    addr = 0xD000_0010
    value = 0x1122_3344_5566_7788 & ((1 << (8 * size)) - 1)
    with kvm_host.create_vm(memory_mib=4, irqchip=False) as vm:
        prog = vm.load("mmio_write", addr=addr, value=value, size=size)
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        e = vcpu.run(timeout_s=2)
        assert (e.kind, e.address, e.length, e.is_write, e.data) == ("mmio", addr, size, True, value)


def test_mmio_read_exit_and_the_value_the_guest_sees(kvm_host: Host) -> None:
    addr = 0xE000_0000
    with kvm_host.create_vm(memory_mib=4, irqchip=False) as vm:
        prog = vm.load("mmio_read", addr=addr, size=4)
        vcpu = vm.create_vcpu(0)
        vcpu.mmio_read_value = 0xDEAD_BEEF
        vcpu.start(prog)
        e = vcpu.run(timeout_s=2)
        assert (e.kind, e.address, e.length, e.is_write) == ("mmio", addr, 4, False)
        vcpu.run_program(timeout_s=2)
        assert vm.results(prog)["value"][0] == 0xDEAD_BEEF


def test_hlt_exits_to_user_space_without_irqchip(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4, irqchip=False) as vm:
        prog = vm.load("halt")
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        r = vcpu.run_until("hlt", count=3, timeout_s=2)
        assert r.matches == 3 and r.exit.kind == "hlt"
        assert vcpu.stats()["halt_exits"] == 3


def test_triple_fault_is_a_shutdown_exit(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4, irqchip=False) as vm:
        prog = vm.load("triple_fault")
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        assert vcpu.run(timeout_s=2).kind == "shutdown"


def test_unwanted_shutdown_names_what_was_wanted_and_what_came(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4, irqchip=False) as vm:
        prog = vm.load("triple_fault")
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        with pytest.raises(vcpulab.UnexpectedExitError, match="wanted ucall exit, got shutdown"):
            vcpu.run_program(timeout_s=2)


def test_guest_assertion_surfaces_with_its_location(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        prog = vm.load("assert", actual=7, expected=9)
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        with pytest.raises(vcpulab.GuestAssertionError) as ei:
            vcpu.run_program(timeout_s=2)
        msg = str(ei.value)
        assert "program.rs:" in msg and "assert: actual == expected" in msg
        assert "got 0x7" in msg and "expected 0x9" in msg
        # a passing assertion is silent
        ok = vm.load("assert", actual=5, expected=5)
        vcpu.start(ok)
        assert vcpu.run_program(timeout_s=2) == []


def test_pause_loop_counts_into_ram_read_through_numpy(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        prog = vm.load("pause_loop", iterations=2000)
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        vcpu.run_program(timeout_s=10)
        counter = vm.memory[prog.data : prog.data + 8].view("<u8")[0]
        assert counter == 2000
        assert vm.results(prog)["counter"][0] == 2000
        # every guest instruction is counted by the emulator on this host; at
        # least the 4 per iteration of the loop body
        assert vcpu.stats()["insn_emulation"] >= 4 * 2000 or vcpulab.kvm.virtualization() in ("vmx", "svm")


def test_interrupt_handler_counts_msis_and_eois(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        prog = vm.load("wait_interrupts", vector=0x41, count=3)
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        # run until the guest has enabled its LAPIC and halted (blocks in the kernel)
        from conftest import PinnedThread

        t = PinnedThread(lambda: vcpu.run_program(timeout_s=5), {0})
        t.start()
        import time

        deadline = time.monotonic() + 5
        while vm.irq_counts()[0x41] < 3 and time.monotonic() < deadline:
            try:
                vm.send_msi(0, 0x41)
            except IndexError:
                pass  # LAPIC not yet software-enabled by the guest
            time.sleep(0.01)
        t.value()
        assert vm.irq_counts()[0x41] == 3
        assert vm.results(prog)["halts"][0] >= 3


def test_sync_messages_carry_their_values(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        prog = vm.load("sync", count=5)
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        assert vcpu.run_program(timeout_s=5) == [0, 1, 2, 3, 4]
        # one at a time, as ucall matches
        vcpu.start(prog)
        r = vcpu.run_until("ucall", timeout_s=5)
        assert r.ucall == ("sync", 0)


@pytest.mark.parametrize("vector,name", [(0, "#DE"), (6, "#UD")])
def test_guest_exceptions_are_reported_by_the_idt(kvm_host: Host, vector: int, name: str) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        prog = vm.load("exception", vector=vector)
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        with pytest.raises(
            vcpulab.UnexpectedExitError, match=f"guest exception {name} \\(vector {vector}\\) at rip 0x"
        ) as ei:
            vcpu.run_program(timeout_s=5)
        rip = int(str(ei.value).split("at rip ")[1].split()[0].rstrip(","), 16)
        # the reported RIP lies inside the program (after it for #BP: a trap)
        assert prog.entry <= rip <= prog.entry + prog.code_size


def test_int3_is_an_exception_or_an_emulation_failure_depending_on_the_host(kvm_host: Host) -> None:
    """With VMX/SVM the guest takes #BP through its IDT; this project's hosts
    emulate every instruction and their emulator does not handle INT3: KVM
    exits with an internal error, suberror 1 (KVM_INTERNAL_ERROR_EMULATION)."""
    with kvm_host.create_vm(memory_mib=4) as vm:
        prog = vm.load("exception", vector=3)
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        if kvm_host.virtualization in ("vmx", "svm"):
            with pytest.raises(vcpulab.UnexpectedExitError, match="#BP"):
                vcpu.run_program(timeout_s=5)
        else:
            e = vcpu.run(timeout_s=5)
            assert (e.kind, e.suberror) == ("internal_error", 1)


def test_the_gil_is_released_while_a_vcpu_runs(kvm_host: Host) -> None:
    """Python code runs while a vCPU thread is inside a 1 s run: this thread
    makes progress in the middle of it (0.2-0.8 s in). Timed by the clock, not
    by an iteration count, which a busy machine's share of the CPU would set."""
    import threading
    import time

    with kvm_host.create_vm(memory_mib=4) as vm:
        vcpu = vm.create_vcpu(0)
        vcpu.start(vm.load("endless_loop"))
        started = threading.Event()

        def body() -> None:
            started.set()
            pytest.raises(TimeoutError, vcpu.run_until, "hlt", timeout_s=1.0)

        t = threading.Thread(target=body)
        t.start()
        started.wait()
        t0 = time.monotonic()
        mid = 0
        while t.is_alive() and time.monotonic() - t0 < 5:
            if 0.2 < time.monotonic() - t0 < 0.8:
                mid += 1  # pure-Python work: only possible while the vCPU thread does not hold the GIL
        t.join()
        assert mid > 0, "no Python progress while the vCPU ran"


def test_sample_stats_gives_one_row_per_vcpu(kvm_host: Host) -> None:
    from vcpulab.kvm import sample_stats

    with kvm_host.create_vm(memory_mib=4, irqchip=False) as vm:
        prog = vm.load("halt")
        vs = [vm.create_vcpu(i) for i in range(3)]
        for v in vs:
            v.start(prog)
        vs[1].run_until("hlt", count=4, timeout_s=5)
        df = sample_stats(vs, t_ns=123)
        assert df.height == 3 and df["vcpu"].to_list() == [0, 1, 2]
        assert (df["t_ns"] == 123).all()
        assert df.filter(df["vcpu"] == 1)["halt_exits"][0] == 4
        assert df.filter(df["vcpu"] == 0)["halt_exits"][0] == 0
        assert "insn_emulation" in df.columns and "halt_wait_ns" in df.columns


def test_string_io_reports_element_size_and_count(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4, irqchip=False) as vm:
        prog = vm.load("io_out_string", port=0x80, count=16)
        vm.write(prog.data, bytes(range(16)))
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        sent = b""
        while len(sent) < 16:
            e = vcpu.run(timeout_s=2)
            assert (e.kind, e.port, e.size, e.direction) == ("io", 0x80, 1, "out")
            assert e.count is not None and e.count >= 1 and len(e.data_bytes) == e.count
            sent += e.data_bytes
        assert sent == bytes(range(16))


def test_a_vcpu_id_beyond_the_programs_slots_is_a_guest_assertion(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        prog = vm.load("spin_lock", vcpus=2, iterations=1)
        vcpu = vm.create_vcpu(5)
        vcpu.start(prog)
        with pytest.raises(vcpulab.GuestAssertionError, match="vCPU id below the program's vcpus parameter: got 0x5"):
            vcpu.run_program(timeout_s=5)


def test_an_exit_prints_compares_and_converts_like_a_value(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4, irqchip=False) as vm:
        prog = vm.load("io_out", port=0x3F8, value=0x5A, size=1)
        vcpu = vm.create_vcpu(0)
        vcpu.start(prog)
        e = vcpu.run(timeout_s=2)
        assert isinstance(e, vcpulab.kvm.Exit)
        assert repr(e) == "Exit(kind='io', port=1016, size=1, count=1, direction='out', data=90, data_bytes=b'Z')"
        assert str(e) == "io port=0x3f8 size=0x1 count=0x1 direction=out data=0x5a"
        d = e.to_dict()
        assert d["port"] == 0x3F8 and d["address"] is None and set(d) >= {"kind", "event_data", "internal_data"}
        vcpu.start(prog)
        again = vcpu.run(timeout_s=2)
        assert again == e and hash(again) == hash(e) and again is not e
        h = vcpu.run(timeout_s=2)
        assert h.kind == "hlt" and h != e and h.port is None
        assert {e, again, h} == {e, h}
        with pytest.raises(AttributeError):
            e.kind = "hlt"  # type: ignore[misc]


@pytest.mark.parametrize(
    "bad,err",
    [
        (True, TypeError),
        ("1", TypeError),
        (0, ValueError),
        (-1.0, ValueError),
        (float("nan"), ValueError),
        (10**9, ValueError),
        (None, TypeError),
        ([1.0], TypeError),
    ],
)
def test_run_names_a_bad_timeout(kvm_host: Host, bad: object, err: type) -> None:
    """An instance's run is the Rust method that makes the Python method's
    checks (src/py/kvm.rs run_checked): both refuse a bad timeout, passed by
    name or by position, with the same error and message."""
    from vcpulab.kvm import Vcpu

    with kvm_host.create_vm(memory_mib=2, irqchip=False) as vm:
        v = vm.create_vcpu(0)
        assert type(v.run).__name__ == "builtin_function_or_method"
        with pytest.raises(err, match="timeout") as fast:
            v.run(timeout_s=bad)  # type: ignore[arg-type]
        with pytest.raises(err, match="timeout") as positional:
            v.run(bad)  # type: ignore[arg-type]
        with pytest.raises(err, match="timeout") as method:
            Vcpu.run(v, bad)  # type: ignore[arg-type]
        assert str(fast.value) == str(positional.value) == str(method.value)
