//! Fixtures shared by the simulator's rule tests on hand-built states.

use super::config::*;
use super::engine::Sim;
use super::policy;

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
