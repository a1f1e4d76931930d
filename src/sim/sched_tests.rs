//! The EEVDF yield rules (yield_task_fair's penalty and its scope) on hand-built states.

use super::super::config::*;
use super::super::engine::{Sim, TaskKind};
use crate::sim::test_util::{computing_vm, sim_of};

/// `vms` VMs of `v` vCPUs each, pinned round robin (vCPU g over all VMs on
/// CPU g mod `p`), each vCPU computing forever, under EEVDF with `scope`.
fn rr(vms: u32, v: u32, p: u32, scope: YieldScope) -> Sim {
    let vm = computing_vm(v);
    let c = SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig { pcpus: p, affinity: Affinity::RoundRobin, yield_scope: scope, ..Default::default() },
        vms: vec![vm; vms as usize],
        ..Default::default()
    };
    let mut s = sim_of(&c);
    s.step_until(10_000).unwrap();
    s
}

const MS: i64 = 1_000_000;

fn vcpu(s: &Sim, t: usize) -> usize {
    let TaskKind::Vcpu(v) = s.tasks[t].kind else { panic!("not a vCPU") };
    v as usize
}

/// CPU `cpu`'s curr made eligible (1 ms behind the first queued task) and
/// charged up to now; returns (curr, first queued).
fn eligible_curr(s: &mut Sim, cpu: usize) -> (usize, usize) {
    let c = s.rqs[cpu].curr.expect("curr") as usize;
    let q = s.rqs[cpu].queue[0] as usize;
    s.rqs[cpu].exec_start = s.now;
    s.tasks[c].vruntime = s.tasks[q].vruntime - MS;
    s.tasks[c].deadline = s.tasks[c].vruntime + s.tasks[c].vslice;
    assert!(s.eligible(cpu, c));
    (c, q)
}

/// yield_to from curr of `cpu` to `target`; returns curr's (vruntime,
/// deadline) before and after.
fn yield_from(s: &mut Sim, cpu: usize, target: usize) -> ((i64, i64), (i64, i64)) {
    let c = s.rqs[cpu].curr.expect("curr") as usize;
    let before = (s.tasks[c].vruntime, s.tasks[c].deadline);
    let mut t = s.now;
    assert_eq!(s.yield_to(vcpu(s, c), vcpu(s, target), &mut t), 1);
    (before, (s.tasks[c].vruntime, s.tasks[c].deadline))
}

#[test]
fn forfeit_on_yield_moves_an_eligible_yielders_vruntime_to_its_deadline_in_one_shared_queue() {
    // 79104becf42b: se->vruntime = se->deadline; se->deadline += slice
    let mut s = rr(2, 8, 8, YieldScope::RunQueue);
    let (c, q) = eligible_curr(&mut s, 0);
    assert_ne!(s.vcpus[vcpu(&s, c)].vm, s.vcpus[vcpu(&s, q)].vm, "two VMs share CPU 0");
    let ((_, d0), (v1, d1)) = yield_from(&mut s, 0, q);
    assert_eq!(v1, d0);
    assert_eq!(d1, d0 + s.tasks[c].vslice);
    assert_eq!(s.rqs[0].buddy, Some(q as u32));
}

#[test]
fn an_ineligible_yielder_keeps_its_vruntime_and_only_its_deadline_moves() {
    let mut s = rr(2, 8, 8, YieldScope::RunQueue);
    let c = s.rqs[0].curr.unwrap() as usize;
    let q = s.rqs[0].queue[0] as usize;
    s.rqs[0].exec_start = s.now;
    s.tasks[c].vruntime = s.tasks[q].vruntime + MS;
    assert!(!s.eligible(0, c));
    let ((v0, d0), (v1, d1)) = yield_from(&mut s, 0, q);
    assert_eq!((v1, d1), (v0, d0 + s.tasks[c].vslice));
}

#[test]
fn vm_group_scope_keeps_the_penalty_off_a_cpu_shared_with_another_vm() {
    // CPU 0 holds vCPU 0 of VM 0 and vCPU 0 of VM 1: the yielder's group
    // queue holds it alone, so yield_task_fair changes nothing where the two
    // VMs compete; the next buddy (set along the hierarchy) still applies.
    let mut s = rr(2, 8, 8, YieldScope::VmGroup);
    let (_, q) = eligible_curr(&mut s, 0);
    let (before, after) = yield_from(&mut s, 0, q);
    assert_eq!(before, after);
    assert_eq!(s.rqs[0].buddy, Some(q as u32));
}

#[test]
fn vm_group_scope_applies_the_penalty_among_the_vms_own_threads() {
    // 1 VM of 17 vCPUs on 8 CPUs: CPU 0 holds three vCPUs of the same VM,
    // the flat queue is the group's queue and the kernel rule applies.
    let mut s = rr(1, 17, 8, YieldScope::VmGroup);
    let (c, q) = eligible_curr(&mut s, 0);
    let ((_, d0), (v1, d1)) = yield_from(&mut s, 0, q);
    assert_eq!((v1, d1), (d0, d0 + s.tasks[c].vslice));
}

#[test]
fn vm_group_scope_returns_early_when_the_yielder_runs_alone() {
    // 9 vCPUs on 8 CPUs: CPU 1 runs one task (rq->nr_running == 1: yield_task_fair
    // returns at once), CPU 0 two; one shared queue penalises anyway (the
    // simulator's run_queue rule), the group scope does not.
    for (scope, penalised) in [(YieldScope::RunQueue, true), (YieldScope::VmGroup, false)] {
        let mut s = rr(1, 9, 8, scope);
        assert_eq!(s.nr_running(1), 1);
        let q = s.rqs[0].queue[0] as usize;
        s.rqs[1].exec_start = s.now;
        let (before, after) = yield_from(&mut s, 1, q);
        assert_eq!(before != after, penalised, "{scope:?}");
    }
}
