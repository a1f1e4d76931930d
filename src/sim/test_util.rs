//! Fixtures shared by the simulator's rule tests on hand-built states.

use super::config::*;
use super::engine::Sim;
use super::policy;
use super::run;
use super::state::NICE0;

/// A simulation of `c` with the built-in policies (panics on a bad config: tests only).
pub fn sim_of(c: &SimConfig) -> Sim {
    Sim::new(c, &|_, vm| Ok(policy::builtin(&vm.policy).unwrap())).unwrap()
}

/// A VM of `v` vCPUs without directed yield, each thread computing forever
/// (100 ms kernel-mode phases).
pub fn computing_vm(v: u32) -> VmConfig {
    VmConfig {
        vcpus: v,
        policy: PolicyConfig { kind: PolicyKind::NoYield, ..Default::default() },
        workload: WorkloadConfig {
            phases: vec![Phase::Compute { ns: 100_000_000, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 }],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Per VM: the sum of its vCPUs' useful time.
pub fn useful_per_vm(c: &SimConfig) -> Vec<u64> {
    let r = run(c).unwrap();
    let (vm, useful) = (r.vcpus.u64s("vm"), r.vcpus.u64s("useful_ns"));
    let mut out = vec![0; c.vms.len()];
    for (i, &u) in useful.iter().enumerate() {
        out[vm[i] as usize] += u;
    }
    out
}

/// Task groups (CFS's or EEVDF's) share one CPU between VMs, not threads:
/// `vms(&[1, 3], 1, groups)` puts a 1-vCPU VM beside a 3-vCPU VM on one
/// CPU, computing; one flat queue gives each thread a quarter (1:3 between
/// the VMs), a group per VM gives each VM half, and each of the 3-vCPU VM's
/// threads a third of its VM's half.
pub fn assert_vms_not_threads_share_a_cpu(vms: impl Fn(&[u32], u32, bool) -> SimConfig) {
    let flat = useful_per_vm(&vms(&[1, 3], 1, false));
    let grouped = useful_per_vm(&vms(&[1, 3], 1, true));
    let share = |u: &[u64]| u[0] as f64 / (u[0] + u[1]) as f64;
    assert!((share(&flat) - 0.25).abs() < 0.03, "flat {flat:?}");
    assert!((share(&grouped) - 0.5).abs() < 0.03, "grouped {grouped:?}");
    let r = run(&vms(&[1, 3], 1, true)).unwrap();
    let u = r.vcpus.u64s("useful_ns");
    for &x in &u[1..] {
        assert!((x as f64 / u[1..].iter().sum::<u64>() as f64 - 1.0 / 3.0).abs() < 0.05, "{u:?}");
    }
}

/// `calc_group_shares` on `c` (VM 0's vCPUs on CPUs 0 and 1, VM 1's one
/// vCPU on CPU 0, computing, with groups): 1024 · 1024 / 2048 for each half
/// of VM 0 and all of VM 1 after 10 ms (`check` runs on that state), so on
/// CPU 0 VM 1's vCPU gets 2/3 and VM 0's 1/3, and VM 0's other has CPU 1.
pub fn assert_a_group_weighs_its_cpus_share_of_the_vms_load(c: &SimConfig, check: impl Fn(&Sim)) {
    let mut s = sim_of(c);
    s.step_until(10_000_000).unwrap();
    let w: Vec<u64> = s.groups.g.iter().map(|g| g.weight).collect();
    assert_eq!((w[0], w[1], w[2]), (NICE0 / 2, NICE0 / 2, NICE0));
    check(&s);
    let r = run(c).unwrap();
    let u = r.vcpus.u64s("useful_ns");
    let cpu0 = (u[0] + u[2]) as f64;
    assert!((u[2] as f64 / cpu0 - 2.0 / 3.0).abs() < 0.04, "{u:?}");
    assert!(u[1] as f64 > 0.97 * c.duration_ns as f64, "{u:?}");
}
