//! CFS task groups (`Cfs.vm_groups`) on hand-built and stepped states.

use super::super::config::*;
use super::super::engine::Sim;
use super::{Lvl, GROUP_ENT};
use crate::sim::test_util::{
    assert_a_group_weighs_its_cpus_share_of_the_vms_load, assert_group_counts, assert_vms_not_threads_share_a_cpu,
    computing_vm, curr_and_queued_in_two_groups, curr_vcpu, kthread_and_io_noise, run_conserved_and_deterministic,
    sim_of,
};

const MS: u64 = 1_000_000;

/// VMs of the given vCPU counts, each thread computing forever, pinned
/// round-robin over `p` CPUs (vCPU `g` of the host on CPU `g % p`), CFS.
fn vms(v: &[u32], p: u32, groups: bool) -> SimConfig {
    let mut host =
        HostConfig { n_pcpus: p, affinity: Affinity::RoundRobin, scheduler: Scheduler::Cfs, ..Default::default() };
    host.cfs.vm_groups = groups;
    SimConfig { duration_ns: 300 * MS, host, vms: v.iter().map(|&n| computing_vm(n)).collect(), ..Default::default() }
}

/// The group bookkeeping agrees with the tasks: each group's runnable
/// count and load are its VM's runnable vCPU threads on that CPU, the
/// VM's load is their sum, a group entity is on the root exactly while it
/// has a runnable task, and every mark names an entity of its level.
fn check_invariants(s: &Sim) {
    assert_group_counts(s);
    for (i, gr) in s.groups.g.iter().enumerate() {
        assert!((super::MIN_SHARES..=super::GROUP_SHARES).contains(&gr.weight));
        for m in [gr.next, gr.last, gr.skip].into_iter().flatten() {
            assert_eq!(s.cg_of(m as usize), Some(i), "a group's mark names one of its tasks");
        }
    }
}

#[test]
fn vms_not_threads_share_a_cpu_with_vm_groups() {
    assert_vms_not_threads_share_a_cpu(vms);
}

#[test]
fn a_group_entity_weighs_its_cpus_share_of_the_groups_load() {
    // VM 1 has nothing on CPU 1: its weight is not used there
    assert_a_group_weighs_its_cpus_share_of_the_vms_load(&vms(&[2, 1], 2, true), check_invariants);
}

#[test]
fn yield_to_marks_every_level_and_the_yielders_group_is_skipped_at_the_root() {
    // 1 CPU: VM 0 (vCPUs 0, 1), VM 1 (vCPU 2), all computing
    let mut s = sim_of(&vms(&[2, 1], 1, true));
    s.step_until(MS).unwrap();
    let (curr, me) = curr_vcpu(&s, 0);
    let vm = s.vcpus[me].vm as usize;
    // a sibling of the running vCPU, queued on the same CPU
    let sib = (0..s.vcpus.len()).find(|&v| v != me && s.vcpus[v].vm as usize == vm);
    let Some(target) = sib else {
        // VM 1's lone vCPU is running: yield from it to VM 0's vCPU 0 instead
        let mut t = s.now;
        assert_eq!(s.yield_to(me, 0, &mut t), 1);
        let (tg, g0) = (s.vcpus[0].task as usize, 0);
        assert_eq!(s.groups.g[g0].next, Some(tg as u32));
        assert_eq!(s.rqs[0].buddy, Some(GROUP_ENT | g0 as u32));
        assert_eq!(s.rqs[0].skip, Some(GROUP_ENT | 1));
        assert_eq!(s.cg_pick(0), Some(tg));
        return;
    };
    let tg = s.vcpus[target].task as usize;
    let g = vm; // group index vm · n_pcpus + cpu with one CPU
                // the target right of the yielder, within the wake-up granularity
                // (1 ms on 1 CPU: factor 1)
    s.tasks[tg].vruntime = s.tasks[curr].vruntime + (MS / 2) as i64;
    let mut t = s.now;
    assert_eq!(s.yield_to(me, target, &mut t), 1);
    assert_eq!(s.groups.g[g].next, Some(tg as u32), "next buddy in the group");
    assert_eq!(s.groups.g[g].skip, Some(curr as u32), "skip buddy in the group");
    assert_eq!(s.rqs[0].buddy, Some(GROUP_ENT | g as u32), "next buddy at the root: the target's group");
    assert_eq!(s.rqs[0].skip, Some(GROUP_ENT | g as u32), "skip buddy at the root: the yielder's group");
    // the root's next buddy wins over its skip; in the group the target does
    assert_eq!(s.cg_pick(0), Some(tg));
    assert_eq!(s.groups.g[g].next, None, "cleared once picked");
    check_invariants(&s);
}

#[test]
fn a_wakeup_across_groups_compares_the_group_entities() {
    let mut s = sim_of(&vms(&[1, 1], 1, true));
    s.step_until(MS).unwrap();
    let (c, other, gc, go) = curr_and_queued_in_two_groups(&s);
    // the tasks' own vruntimes say nothing across groups: the entities decide
    s.tasks[other].vruntime = s.tasks[c].vruntime - 100 * MS as i64;
    s.groups.g[go].vruntime = s.groups.g[gc].vruntime;
    assert!(!s.cg_check_preempt_wakeup(0, other, c));
    s.groups.g[go].vruntime = s.groups.g[gc].vruntime - 5 * MS as i64; // > 1 ms gran (1 CPU: factor 1)
    assert!(s.cg_check_preempt_wakeup(0, other, c));
    assert_eq!(s.rqs[0].last, None, "no last buddy across groups");
    assert_eq!(s.lvl_curr(Lvl::Root(0)), Some(GROUP_ENT | gc as u32));
}

#[test]
fn group_bookkeeping_holds_through_yields_migrations_and_noise() {
    for policy in [PolicyKind::Upstream, PolicyKind::NoYield] {
        let mut c = super::super::tests::small(policy, 3, 4, 4);
        c.host.scheduler = Scheduler::Cfs;
        c.host.cfs.vm_groups = true;
        c.host.affinity = Affinity::All;
        c.host.seeded_ties = true;
        c.host.noise = kthread_and_io_noise();
        let mut s = sim_of(&c);
        let mut at = 0;
        while at < c.duration_ns {
            at += 50_000;
            s.step_until(at).unwrap();
            check_invariants(&s);
        }
        run_conserved_and_deterministic(&c, policy);
    }
}

#[test]
fn without_vm_groups_no_group_state_exists() {
    let s = sim_of(&vms(&[2, 1], 2, false));
    assert!(!s.groups.on && s.groups.g.is_empty());
    let mut e = vms(&[2, 1], 2, true);
    e.host.scheduler = Scheduler::Fair;
    assert!(!sim_of(&e).groups.on, "EEVDF has no groups here");
}

#[test]
fn equal_group_vruntimes_rank_by_the_vms_seeded_tie_not_its_index() {
    let mut c = vms(&[1, 1, 1, 1], 1, true);
    c.host.seeded_ties = true;
    let s = sim_of(&c);
    let ties: Vec<u32> = (0..4).map(|vm| s.ent_key(GROUP_ENT | vm as u32).1).collect();
    let first: Vec<u32> = (0..4).map(|vm| s.tasks[s.vcpus[s.vms[vm].vcpu0 as usize].task as usize].tie).collect();
    assert_eq!(ties, first);
    let mut sorted = ties.clone();
    sorted.sort();
    assert_ne!(ties, sorted, "seed 0 ranks the VMs out of index order");
}
