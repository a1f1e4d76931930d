//! Fixtures shared by the simulator's rule tests on hand-built states.

use super::config::*;
use super::engine::Sim;
use super::metrics::PCPU_CATS;
use super::policy;
use super::state::NICE0;
use super::{run, SimResult};

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

/// Host noise on every CPU: kernel threads at 500 Hz of 10 µs and the VMM's
/// I/O thread at 500 Hz of 20 µs (the bookkeeping walks' disturbance).
pub fn kthread_and_io_noise() -> HostNoise {
    HostNoise { kthread_hz: 500.0, kthread_ns: 10_000, vmm_io_hz: 500.0, vmm_io_ns: 20_000, ..Default::default() }
}

/// Host CPU `cpu`'s time over every accounting category (`PCPU_CATS`): the
/// run's duration when the accounting is conserved.
pub fn pcpu_time(r: &SimResult, cpu: usize) -> u64 {
    PCPU_CATS.iter().map(|k| r.pcpus.u64s(k)[cpu]).sum()
}

/// Runs `c` twice and checks what every run must show: the same result both
/// times, each host CPU's categories summing to the duration, operations,
/// and (with `policy` upstream) successful yields. Returns the result.
pub fn run_conserved_and_deterministic(c: &SimConfig, policy: PolicyKind) -> SimResult {
    let a = run(c).unwrap();
    assert_eq!(a, run(c).unwrap(), "deterministic");
    let d = a.summary.u64s("duration_ns")[0];
    for i in 0..c.host.n_pcpus as usize {
        assert_eq!(pcpu_time(&a, i), d, "time on CPU {i}");
    }
    assert!(a.summary.u64s("ops")[0] > 0);
    if policy == PolicyKind::Upstream {
        assert!(a.summary.u64s("yield_ok")[0] > 0, "yields ran");
    }
    a
}

/// The task running on CPU `cpu` and its vCPU (panics when none or not a vCPU).
pub fn curr_vcpu(s: &Sim, cpu: usize) -> (usize, usize) {
    let curr = s.rqs[cpu].curr.expect("a task runs") as usize;
    let super::state::TaskKind::Vcpu(v) = s.tasks[curr].kind else { panic!("curr is not a vCPU") };
    (curr, v as usize)
}

/// On one CPU with two one-vCPU VMs in task groups: (the running task, the
/// queued one, the running task's group, the queued task's group).
pub fn curr_and_queued_in_two_groups(s: &Sim) -> (usize, usize, usize, usize) {
    let cur = s.rqs[0].curr.expect("a task runs") as usize;
    let other = s.rqs[0].queue[0] as usize;
    let (gc, go) = (s.cg_of(cur).expect("in a group"), s.cg_of(other).expect("in a group"));
    assert_ne!(gc, go);
    (cur, other, gc, go)
}

/// The group bookkeeping both group models keep (`Cfs.vm_groups`,
/// `Host.vm_groups`) agrees with the tasks: each group's runnable count and
/// load are its VM's runnable (not parked) vCPU threads queued or running
/// on that CPU, the VM's load is their sum, and a group entity is on the
/// root exactly while it has a runnable task.
pub fn assert_group_counts(s: &Sim) {
    let g = &s.groups;
    let p = g.n_pcpus;
    let mut tg = vec![0u64; s.vms.len()];
    for (i, gr) in g.g.iter().enumerate() {
        let (vm, cpu) = (i / p, i % p);
        let mine: Vec<usize> = (0..s.tasks.len())
            .filter(|&t| {
                let tk = &s.tasks[t];
                tk.runnable
                    && !tk.parked
                    && tk.cpu as usize == cpu
                    && s.cg_of(t) == Some(i)
                    && (s.rqs[cpu].curr == Some(t as u32) || s.rqs[cpu].queue.contains(&(t as u32)))
            })
            .collect();
        assert_eq!(gr.nr_running as usize, mine.len(), "group of VM {vm} on CPU {cpu} at {}", s.now);
        let load: u64 = mine.iter().map(|&t| s.tasks[t].weight).sum();
        assert_eq!(gr.load, load, "load of VM {vm} on CPU {cpu}");
        tg[vm] += load;
        assert_eq!(g.queued[cpu].contains(&(vm as u32)), gr.nr_running > 0, "VM {vm} on CPU {cpu}'s root");
    }
    assert_eq!(g.tg_load, tg);
}
