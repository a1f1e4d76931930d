//! Smoke tests against the real /dev/kvm. Where the build found no usable
//! /dev/kvm (`cfg(vcpulab_no_kvm)`, build.rs) they are ignored, and `cargo
//! test` lists them so with the reason; where it found one, a failure to
//! open it is a test failure.
//! The full behavioural suite is in Python (tests/); these keep the Rust layer honest.

use std::time::{Duration, Instant};

use super::guest::program::Spec;
use super::*;

fn host() -> Host {
    Host::open().expect("/dev/kvm opened at build time (build.rs) but not now")
}

fn until(kinds: &[&str], timeout_ms: u64) -> RunUntil {
    RunUntil {
        kinds: kinds.iter().map(|s| s.to_string()).collect(),
        port: None,
        count: 1,
        deadline: Instant::now() + Duration::from_millis(timeout_ms),
    }
}

#[test]
#[cfg_attr(vcpulab_no_kvm, ignore = "needs /dev/kvm, which this host lacks (build.rs)")]
fn io_out_exit_decodes() {
    let h = host();
    let mut vm = h.create_vm(VmOptions { memory_mib: 4, irqchip: false }).unwrap();
    let p = vm.load(&Spec::IoOut { port: 0x3f8, value: 0x1234_5678, size: 4 }).unwrap();
    let mut v = vm.create_vcpu(0).unwrap();
    v.start(p.entry).unwrap();
    let out = v.run_until(&until(&["io"], 2000)).unwrap();
    assert_eq!(
        out.exit,
        Exit::Io { port: 0x3f8, size: 4, count: 1, dir: IoDir::Out, data: 0x1234_5678u32.to_le_bytes().to_vec() }
    );
}

#[test]
#[cfg_attr(vcpulab_no_kvm, ignore = "needs /dev/kvm, which this host lacks (build.rs)")]
fn pause_loop_counts_in_ram() {
    let h = host();
    let mut vm = h.create_vm(VmOptions { memory_mib: 4, irqchip: true }).unwrap();
    let p = vm.load(&Spec::PauseLoop { iterations: 500 }).unwrap();
    let mut v = vm.create_vcpu(0).unwrap();
    v.start(p.entry).unwrap();
    let out = v.run_to_ucall(Duration::from_secs(5)).unwrap();
    assert_eq!(out.ucall, Some(Ucall::Done));
    assert_eq!(vm.memory().read_u64(p.data).unwrap(), 500);
}

#[test]
#[cfg_attr(vcpulab_no_kvm, ignore = "needs /dev/kvm, which this host lacks (build.rs)")]
fn deadline_forces_an_endless_loop_out() {
    let h = host();
    let mut vm = h.create_vm(VmOptions { memory_mib: 4, irqchip: true }).unwrap();
    let p = vm.load(&Spec::EndlessLoop).unwrap();
    let mut v = vm.create_vcpu(0).unwrap();
    v.start(p.entry).unwrap();
    let t = Instant::now();
    let e = v.run_until(&until(&["hlt"], 200)).unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
#[cfg_attr(vcpulab_no_kvm, ignore = "needs /dev/kvm, which this host lacks (build.rs)")]
fn ipi_ping_pong_waits_for_a_responder_that_starts_late() {
    // KVM drops a fixed IPI sent to a software-disabled local APIC, so the
    // initiator must not send before the responder has enabled its LAPIC.
    // Run the two vCPUs alternately from one thread, vCPU 0 first, in 20 ms
    // turns (each turn ends by its deadline: spinning, or halted in the kernel).
    let h = host();
    let mut vm = h.create_vm(VmOptions { memory_mib: 4, irqchip: true }).unwrap();
    let p = vm.load(&Spec::IpiPingPong { rounds: 3, gap_cycles: 0, vector_base: 0x60 }).unwrap();
    let mut v0 = vm.create_vcpu(0).unwrap();
    let mut v1 = vm.create_vcpu(1).unwrap();
    v0.start(p.entry).unwrap();
    v1.start(p.entry).unwrap();
    let rounds_done = |vm: &Vm| vm.memory().read_u64(p.data).unwrap();
    for _ in 0..20 {
        for v in [&mut v0, &mut v1] {
            // the outcome of a turn does not matter, the rounds in RAM do
            let _ = v.run_until(&until(&["hlt"], 20));
        }
        if rounds_done(&vm) == 3 {
            break;
        }
    }
    assert_eq!(rounds_done(&vm), 3, "the first request was lost");
}

#[test]
#[cfg_attr(vcpulab_no_kvm, ignore = "needs /dev/kvm, which this host lacks (build.rs)")]
fn own_stats_fds_pass_the_foreign_check_and_are_kept() {
    use std::os::fd::{AsFd, AsRawFd};
    let h = host();
    let mut vm = h.create_vm(VmOptions { memory_mib: 4, irqchip: false }).unwrap();
    let mut v = vm.create_vcpu(0).unwrap();
    let vstats = v.stats_fd().unwrap().clone();
    assert_eq!(foreign::check_stats_fd(vstats.as_fd()).unwrap(), foreign::StatsOwner::Vcpu(0));
    assert_eq!(foreign::check_stats_fd(vm.stats_fd().unwrap().as_fd()).unwrap(), foreign::StatsOwner::Vm);
    let me = foreign::Process::open(std::process::id() as i32).unwrap();
    let kept = match me.take_stats_fd(vstats.as_fd().as_raw_fd()) {
        Ok(k) => k,
        Err(e @ Error::Os { .. }) => return eprintln!("skipping: {e}"), // pidfd_getfd refused here
        Err(e) => panic!("{e}"),
    };
    assert_eq!(kept.owner, foreign::StatsOwner::Vcpu(0));
    assert!(kept.stats.schema.id.ends_with("/vcpu-0"), "{}", kept.stats.schema.id);
    assert_ne!(kept.held_by(&me), Some(false));
    let mut buf = Vec::new();
    kept.stats.read_data(&mut buf).unwrap();
    assert_eq!(buf.len(), kept.stats.schema.data_len);
}
