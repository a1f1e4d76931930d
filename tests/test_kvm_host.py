"""The host's /dev/kvm as vcpulab reports it (what this project's host offers, measured here)."""

from __future__ import annotations

import pytest

import vcpulab
from vcpulab.kvm import Host, module_params, virtualization


def test_host_reports_api_and_limits(kvm_host: Host) -> None:
    assert kvm_host.api_version == 12
    assert kvm_host.max_vcpus >= 1
    assert kvm_host.max_vcpu_id >= kvm_host.max_vcpus


def test_named_capabilities_include_the_ones_vcpulab_needs(kvm_host: Host) -> None:
    caps = kvm_host.capabilities
    for name in ("KVM_CAP_HALT_POLL", "KVM_CAP_BINARY_STATS_FD", "KVM_CAP_IRQCHIP", "KVM_CAP_X86_DISABLE_EXITS"):
        assert name in caps
    assert caps["KVM_CAP_HALT_POLL"] == 1
    assert caps["KVM_CAP_BINARY_STATS_FD"] == 1
    assert caps["KVM_CAP_IRQCHIP"] == 1
    # the disable-exits mask is a bit set; this host allows PAUSE at least
    assert caps["KVM_CAP_X86_DISABLE_EXITS"] & 0b100
    assert "pause" in kvm_host.disable_exits_allowed
    assert caps["KVM_CAP_MAX_VCPUS"] == kvm_host.max_vcpus


def test_pv_features_come_from_cpuid_leaf_40000001(kvm_host: Host) -> None:
    pv = kvm_host.pv_features
    assert pv["STEAL_TIME"] is True
    leaf = next(e for e in kvm_host.supported_cpuid() if e.function == 0x4000_0001)
    assert leaf.eax == kvm_host.pv_feature_bits
    assert all(pv[name] == bool(leaf.eax & (1 << bit)) for name, bit in (("STEAL_TIME", 5), ("PV_UNHALT", 7)))


def test_module_params_are_typed(kvm_host: Host) -> None:
    params = kvm_host.module_params
    kvm = params["kvm"]
    assert isinstance(kvm["halt_poll_ns"], int)
    assert isinstance(kvm["halt_poll_ns_grow"], int)
    assert kvm["halt_poll_ns_grow_start"] > 0
    # booleans are parsed from Y/N
    assert any(isinstance(v, bool) for v in kvm.values())
    # PLE knobs exist exactly where a hardware vendor module is loaded
    has_vendor = "kvm_intel" in params or "kvm_amd" in params
    ple = "ple_gap" in params.get("kvm_intel", {}) or "pause_filter_count" in params.get("kvm_amd", {})
    assert ple == has_vendor


def test_virtualization_names_the_backend(kvm_host: Host) -> None:
    v = virtualization()
    assert v in ("vmx", "svm") or v.startswith("kvm_")


def test_module_params_parse_a_fake_sysfs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "kvm_intel" / "parameters"
    p.mkdir(parents=True)
    (p / "ple_gap").write_text("128\n")
    (p / "nested").write_text("Y\n")
    (p / "mode").write_text("auto\n")
    (tmp_path / "other").mkdir()
    assert module_params(tmp_path) == {"kvm_intel": {"mode": "auto", "nested": True, "ple_gap": 128}}


def test_missing_device_says_why_and_how_to_fix(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(vcpulab.KvmUnavailableError, match="does not exist.*modprobe"):
        Host(str(tmp_path / "kvm"))


def test_a_device_that_is_not_kvm_is_rejected() -> None:
    with pytest.raises(vcpulab.KvmUnavailableError, match="API version"):
        Host("/dev/null")
