"""Registers, MSRs, CPUID, halt-poll and exit-disable knobs, stats schema."""

from __future__ import annotations

import numpy as np
import pytest

from vcpulab.kvm import MSR_KVM_STEAL_TIME, Host, Regs


def test_vcpu_starts_in_long_mode_with_named_registers(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        v = vm.create_vcpu(3)
        s = v.sregs
        assert s.long_mode
        assert s.cs.selector == 0x08 and s.cs.l == 1
        assert s.cr0 & 0x8000_0001 == 0x8000_0001  # PG | PE
        assert s.cr4 & 0x20  # PAE
        assert s.tr.selector == 0x18
        r = v.regs
        assert isinstance(r, Regs)
        assert r.rdi == 3  # programs receive their vCPU id
        v.set_regs(rax=0x1234, r15=7)
        r2 = v.regs
        assert (r2.rax, r2.r15, r2.rip) == (0x1234, 7, r.rip)
        r2.rbx = 99
        v.regs = r2
        assert v.regs.rbx == 99
        v.set_sregs(cr8=0, idt=(s.idt[0], s.idt[1]))
        assert v.sregs.idt == s.idt


def test_msrs_round_trip_and_unknown_msrs_are_named(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        v = vm.create_vcpu(0)
        v.set_msr(0xC000_0102, 0x1234_5678)  # IA32_KERNEL_GS_BASE
        assert v.get_msr(0xC000_0102) == 0x1234_5678
        gpa = v.enable_steal_time()
        assert v.get_msr(MSR_KVM_STEAL_TIME) == gpa | 1
        with pytest.raises(ValueError, match="0xdeadbeef"):
            v.get_msr(0xDEAD_BEEF)


def test_cpuid_carries_the_kvm_leaves_and_the_apic_id(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        v = vm.create_vcpu(5)
        cpuid = {(e.function, e.index): e for e in v.cpuid}
        sig = cpuid[(0x4000_0000, 0)]
        assert (
            sig.ebx.to_bytes(4, "little") + sig.ecx.to_bytes(4, "little") + sig.edx.to_bytes(4, "little")
            == b"KVMKVMKVM\0\0\0"
        )
        assert cpuid[(1, 0)].ebx >> 24 == 5
        assert v.kvm_pv_features["STEAL_TIME"]
        assert v.tsc_khz > 100_000


def test_halt_poll_ns_is_set_and_read_back(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        # before an override, the module parameter applies
        assert vm.halt_poll_ns == kvm_host.module_params["kvm"]["halt_poll_ns"]
        vm.halt_poll_ns = 50_000
        assert vm.halt_poll_ns == 50_000
        vm.halt_poll_ns = 0
        assert vm.halt_poll_ns == 0
        with pytest.raises(ValueError, match="u32"):
            vm.halt_poll_ns = 2**32
        with pytest.raises(ValueError, match="non-negative"):
            vm.halt_poll_ns = -1


def test_disable_exits_follows_the_kernels_rules(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        assert vm.disable_exits_allowed == kvm_host.disable_exits_allowed
        vm.disable_exits(pause=True)
        assert "pause" in vm.disabled_exits
        if "mwait" not in vm.disable_exits_allowed:
            with pytest.raises(ValueError, match="cannot disable exits \\[mwait\\]"):
                vm.disable_exits(mwait=True)
        vm.create_vcpu(0)
        with pytest.raises(ValueError, match="before any vCPU"):
            vm.disable_exits(pause=True)
        with pytest.raises(ValueError, match="at least one"):
            vm.disable_exits()


def test_stats_schema_units_and_histograms(kvm_host: Host) -> None:
    with kvm_host.create_vm(memory_mib=4) as vm:
        v = vm.create_vcpu(0)
        schema = {d["name"]: d for d in v.stats_schema()}
        assert len(schema) >= 40
        wait = schema["halt_wait_ns"]
        assert (wait["type"], wait["unit"], wait["base"], wait["exponent"]) == ("cumulative", "seconds", 10, -9)
        hist = schema["halt_poll_success_hist"]
        assert hist["type"] == "log_hist" and hist["size"] == 32
        assert schema["blocking"]["unit"] == "boolean"
        stats = v.stats()
        assert isinstance(stats["halt_wait_hist"], np.ndarray) and stats["halt_wait_hist"].shape == (32,)
        for name in ("directed_yield_attempted", "preemption_reported", "preemption_other", "halt_successful_poll"):
            assert name in stats
        vm_stats = vm.stats()
        assert "remote_tlb_flush" in vm_stats
