//! EEVDF task groups (`Host.vm_groups`) on hand-built and stepped states.

use super::super::cfs_group::{Lvl, GROUP_ENT};
use super::super::config::*;
use super::super::engine::Sim;
use super::super::run;
use super::super::state::{TaskKind, GROUP_SHARES, NICE0};
use crate::sim::test_util::{
    assert_a_group_weighs_its_cpus_share_of_the_vms_load, assert_group_counts, assert_vms_not_threads_share_a_cpu,
    computing_vm, curr_and_queued_in_two_groups, curr_vcpu, kthread_and_io_noise, run_conserved_and_deterministic,
    sim_of,
};

const MS: u64 = 1_000_000;

/// The 6.x era's EEVDF rules that matter here, with groups on or off.
fn eevdf_host(p: u32, groups: bool) -> HostConfig {
    HostConfig {
        n_pcpus: p,
        affinity: Affinity::RoundRobin,
        scheduler: Scheduler::Fair,
        yield_scope: YieldScope::VmGroup,
        run_to_parity: true,
        slice_check_on_wakeup: true,
        delay_dequeue: true,
        vm_groups: groups,
        ..Default::default()
    }
}

/// VMs of the given vCPU counts, each thread computing forever, pinned
/// round-robin over `p` CPUs (vCPU `g` of the host on CPU `g % p`).
fn vms(v: &[u32], p: u32, groups: bool) -> SimConfig {
    SimConfig {
        duration_ns: 300 * MS,
        host: eevdf_host(p, groups),
        vms: v.iter().map(|&n| computing_vm(n)).collect(),
        ..Default::default()
    }
}

/// The entities on a level's run queue, by a scan independent of
/// `eg_each`: the runnable tasks of the level (queued or curr) and, at
/// the root, the group entities of groups with a runnable task.
fn level_ents(s: &Sim, l: Lvl) -> Vec<u32> {
    let p = s.groups.n_pcpus;
    let (cpu, want) = match l {
        Lvl::Root(c) => (c, None),
        Lvl::Grp(g) => (g % p, Some(g)),
    };
    let mut out: Vec<u32> = (0..s.tasks.len())
        .filter(|&t| {
            let tk = &s.tasks[t];
            tk.runnable
                && !tk.parked
                && tk.cpu as usize == cpu
                && s.cg_of(t) == want
                && (s.rqs[cpu].curr == Some(t as u32) || s.rqs[cpu].queue.contains(&(t as u32)))
        })
        .map(|t| t as u32)
        .collect();
    if want.is_none() {
        for vm in 0..s.vms.len() {
            if s.groups.g[vm * p + cpu].nr_running > 0 {
                out.push(GROUP_ENT | (vm * p + cpu) as u32);
            }
        }
    }
    out
}

/// The group bookkeeping agrees with the tasks, and each level's V is the
/// weighted mean of its entities' vruntimes (within rounding).
fn check_invariants(s: &Sim) {
    assert_group_counts(s);
    let g = &s.groups;
    let p = g.n_pcpus;
    for (i, gr) in g.g.iter().enumerate() {
        assert!(gr.weight <= GROUP_SHARES && gr.weight >= 2);
        if let Some(m) = gr.next {
            assert_eq!(s.cg_of(m as usize), Some(i), "a group's next buddy is one of its tasks");
        }
        if gr.nr_running > 0 {
            assert!(!gr.delayed, "a group on the root is not delayed");
        }
    }
    if g.half_life_ns > 0 {
        check_load_averages(s);
    }
    for cpu in 0..p {
        let levels = std::iter::once(Lvl::Root(cpu)).chain((0..s.vms.len()).map(|vm| Lvl::Grp(vm * p + cpu)));
        for l in levels {
            let ents = level_ents(s, l);
            if ents.is_empty() {
                continue;
            }
            let sw: i128 = ents.iter().map(|&e| s.ent_w(e) as i128).sum();
            let swv: i128 = ents.iter().map(|&e| s.ent_w(e) as i128 * s.ent_vr(e) as i128).sum();
            let mean = swv.div_euclid(sw) as i64;
            let v = s.eg_avg_vruntime(l);
            assert!((v - mean).abs() <= 1, "V of {l:?} at {}: {v} vs {mean}", s.now);
        }
    }
}

/// With `Host.group_load_half_life_ns`: each group's load average, brought
/// to now, is the sum of its attached tasks' averages brought to now (each
/// decays toward its runnable weight), and a VM's sum is its groups'.
fn check_load_averages(s: &Sim) {
    let g = &s.groups;
    let h = g.half_life_ns as f64;
    let keep = |at: u64| (-((s.now - at) as f64) / h).exp2();
    let mut tg = vec![0.0; s.vms.len()];
    for (i, gr) in g.g.iter().enumerate() {
        tg[i / g.n_pcpus] += gr.load_avg;
        let k = keep(gr.avg_at);
        let group_now = gr.load_avg * k + gr.load as f64 * (1.0 - k);
        let tasks_now: f64 = (0..s.tasks.len())
            .filter(|&t| s.cg_of(t).is_some() && g.task_avg_cpu[t] as usize == i % g.n_pcpus)
            .filter(|&t| match s.tasks[t].kind {
                TaskKind::Vcpu(v) => s.vcpus[v as usize].vm as usize == i / g.n_pcpus,
                _ => false,
            })
            .map(|t| {
                let k = keep(g.task_avg_at[t]);
                let w = if g.task_avg_runnable[t] { s.tasks[t].weight as f64 } else { 0.0 };
                g.task_avg[t] * k + w * (1.0 - k)
            })
            .sum();
        assert!((group_now - tasks_now).abs() <= 1e-6 * tasks_now.max(1.0), "group {i}: {group_now} vs {tasks_now}");
    }
    for (vm, &x) in tg.iter().enumerate() {
        assert!((g.tg_load_avg[vm] - x).abs() <= 1e-6 * x.max(1.0), "VM {vm}: {} vs {x}", g.tg_load_avg[vm]);
    }
}

#[test]
fn vms_not_threads_share_a_cpu_with_eevdf_vm_groups() {
    assert_vms_not_threads_share_a_cpu(vms);
}

#[test]
fn a_group_entity_weighs_its_cpus_share_of_the_vms_load() {
    assert_a_group_weighs_its_cpus_share_of_the_vms_load(&vms(&[2, 1], 2, true), check_invariants);
}

#[test]
fn a_reweight_keeps_the_roots_v_and_the_entitys_lag_in_real_time() {
    let c = vms(&[2, 1], 2, true);
    let mut s = sim_of(&c);
    s.step_until(7 * MS).unwrap();
    let g = 2; // VM 1 on CPU 0
    let v0 = s.eg_avg_vruntime(Lvl::Root(0));
    let (w0, lag0) = (s.groups.g[g].weight, v0 - s.groups.g[g].vruntime);
    // the VM's load elsewhere doubles its total: this CPU's share halves
    s.groups.tg_load[1] *= 2;
    s.eg_reweight(g);
    let w1 = s.groups.g[g].weight;
    assert_eq!(w1, w0 / 2);
    let v1 = s.eg_avg_vruntime(Lvl::Root(0));
    assert!((v1 - v0).abs() <= 1, "V moved: {v0} -> {v1}");
    let lag1 = v1 - s.groups.g[g].vruntime;
    // w·lag, the lag in real time, is kept
    assert!((lag1 as i128 * w1 as i128 - lag0 as i128 * w0 as i128).abs() <= w1 as i128, "{lag0} -> {lag1}");
}

#[test]
fn a_yield_to_another_vm_marks_every_level_and_penalises_only_the_yielders_own_queue() {
    // 1 CPU: VM 0 (vCPU 0), VM 1 (vCPU 1), both computing
    let mut s = sim_of(&vms(&[1, 1], 1, true));
    s.step_until(MS).unwrap();
    let (curr, me) = curr_vcpu(&s, 0);
    let target = 1 - me;
    let tg = s.vcpus[target].task as usize;
    let (gm, gt) = (s.cg_of(curr).unwrap(), s.cg_of(tg).unwrap());
    // both groups at the root's V: the target's group is eligible
    let v = s.eg_avg_vruntime(Lvl::Root(0));
    s.groups.g[gt].vruntime = v;
    s.groups.g[gm].vruntime = v;
    let (gv, gd) = (s.groups.g[gm].vruntime, s.groups.g[gm].deadline);
    let (vr, d, vs) = (s.tasks[curr].vruntime, s.tasks[curr].deadline, s.tasks[curr].vslice);
    let mut t = s.now;
    assert_eq!(s.yield_to(me, target, &mut t), 1);
    assert_eq!(s.groups.g[gt].next, Some(tg as u32), "next buddy in the target's group");
    assert_eq!(s.rqs[0].buddy, Some(GROUP_ENT | gt as u32), "next buddy at the root: the target's group");
    // the penalty acts on the yielder's own group queue, where it is alone
    // and so eligible: it forfeits its vruntime to its deadline (v6.19)
    assert!(s.tasks[curr].vruntime >= vr);
    assert_eq!((s.tasks[curr].vruntime, s.tasks[curr].deadline), (s.tasks[curr].vruntime.max(d), d + vs));
    assert_eq!((s.groups.g[gm].vruntime, s.groups.g[gm].deadline), (gv, gd), "the group entity is untouched");
    assert_eq!(s.eg_pick(0), Some(tg));
    assert_eq!((s.groups.g[gt].next, s.rqs[0].buddy), (None, None), "cleared once picked");
    check_invariants(&s);
}

#[test]
fn a_wakeup_across_groups_compares_the_group_entities() {
    let mut c = vms(&[1, 1], 1, true);
    c.host.run_to_parity = false;
    let mut s = sim_of(&c);
    s.step_until(MS).unwrap();
    let (cur, other, gc, go) = curr_and_queued_in_two_groups(&s);
    // the tasks' own deadlines say nothing across groups: the entities decide
    s.tasks[other].deadline = s.tasks[cur].deadline - 100 * MS as i64;
    s.groups.g[go].vruntime = s.groups.g[gc].vruntime + MS as i64;
    s.groups.g[go].deadline = s.groups.g[gc].deadline - MS as i64;
    assert!(!s.eg_check_preempt_wakeup(0, other, cur), "not eligible at the root");
    s.groups.g[go].vruntime = s.groups.g[gc].vruntime - MS as i64;
    assert!(s.eg_check_preempt_wakeup(0, other, cur), "eligible, earlier deadline");
    s.groups.g[go].deadline = s.groups.g[gc].deadline + MS as i64;
    assert!(s.eg_check_preempt_wakeup(0, other, cur), "later deadline, but curr is not eligible: pick_eevdf takes it");
    s.groups.g[go].vruntime = s.groups.g[gc].vruntime;
    assert!(!s.eg_check_preempt_wakeup(0, other, cur), "both eligible, later deadline");
    assert_eq!(s.lvl_curr(Lvl::Root(0)), Some(GROUP_ENT | gc as u32));
}

#[test]
fn group_bookkeeping_holds_through_halts_delays_yields_migrations_and_noise() {
    for (policy, half_life_ns, kernel_place) in [
        (PolicyKind::Upstream, 0, false),
        (PolicyKind::NoYield, 0, false),
        (PolicyKind::Upstream, 32_768_000, false),
        (PolicyKind::Upstream, 32_768_000, true),
    ] {
        // 12 vCPUs on 2 CPUs: on 4 CPUs a run can go without a single yield
        let mut c = super::super::tests::small(policy, 3, 4, 2);
        c.host = HostConfig {
            affinity: Affinity::All,
            seeded_ties: true,
            group_load_half_life_ns: half_life_ns,
            place_lag: if kernel_place { PlaceLag::Kernel } else { PlaceLag::Saved },
            place_rel_deadline: kernel_place,
            ..eevdf_host(2, true)
        };
        c.host.noise = kthread_and_io_noise();
        // sleeps make vCPUs halt, block with negative lag (delayed) and wake
        c.vms[0].workload.phases.push(Phase::Sleep { ns: 300_000, dist: Dist::Exp, prob: 0.3, periodic: false });
        let mut s = sim_of(&c);
        let mut at = 0;
        let mut delayed = 0;
        while at < c.duration_ns {
            at += 50_000;
            s.step_until(at).unwrap();
            check_invariants(&s);
            delayed += s.tasks.iter().filter(|t| t.delayed).count() + s.groups.g.iter().filter(|g| g.delayed).count();
        }
        assert!(delayed > 0, "delayed dequeues happened");
        run_conserved_and_deterministic(&c, policy);
    }
}

#[test]
fn vm_groups_acts_under_eevdf_only_and_needs_the_vm_group_yield_scope_there() {
    let mut c = vms(&[1, 1], 1, true);
    c.host.yield_scope = YieldScope::RunQueue;
    let e = run(&c).unwrap_err().to_string();
    assert!(e.contains("yield_scope = vm_group") && e.contains("run_queue"), "{e}");
    let s = sim_of(&vms(&[1, 1], 1, false));
    assert!(!s.groups.on && s.groups.g.is_empty(), "off: no group state");
    // an era's EEVDF groups and placement rules do not reach gang, CFS or
    // token runs made from it
    for sched in [Scheduler::Gang, Scheduler::Cfs, Scheduler::RoundRobin] {
        // spin-lock VMs: every run has operations (no NaN latencies to compare)
        let mut c = super::super::tests::small(PolicyKind::NoYield, 2, 2, 2);
        c.host = HostConfig {
            scheduler: sched,
            affinity: Affinity::All,
            place_lag: PlaceLag::Kernel,
            place_rel_deadline: true,
            ..eevdf_host(2, true)
        };
        let mut flat = c.clone();
        flat.host.vm_groups = false;
        flat.host.place_lag = PlaceLag::Saved;
        flat.host.place_rel_deadline = false;
        assert!(!sim_of(&c).groups.on, "{sched:?}");
        assert_eq!(run(&c).unwrap(), run(&flat).unwrap(), "{sched:?}");
    }
}

/// Steps `s` (VM 0 with two vCPUs beside VM 1 on CPU 0) in 100-µs steps to
/// an instant at which a vCPU of VM 0 runs there with its sibling queued:
/// (the running task, the queued sibling).
fn vm0_beside_its_sibling(s: &mut Sim) -> (usize, usize) {
    let mut at = 0;
    loop {
        at += 100_000;
        s.step_until(at).unwrap();
        let c = s.rqs[0].curr.unwrap() as usize;
        let sib = s.rqs[0].queue.iter().map(|&t| t as usize).find(|&t| s.cg_of(t) == Some(0));
        if let (Some(0), Some(sib)) = (s.cg_of(c), sib) {
            return (c, sib);
        }
        assert!(at < 100 * MS, "VM 0 runs beside its queued sibling at some instant");
    }
}

#[test]
fn a_switch_inside_a_group_keeps_the_group_entitys_slice_protection_at_the_root() {
    // 1 CPU: VM 0 (vCPUs 0, 1), VM 1 (vCPU 2), all computing
    let mut s = sim_of(&vms(&[2, 1], 1, true));
    let (curr, sib) = vm0_beside_its_sibling(&mut s);
    // both group entities at one vruntime (both eligible), VM 0's protected
    // at the root, and the sibling VM 0's next buddy, eligible in the group
    let v = s.groups.g[0].vruntime;
    s.groups.g[1].vruntime = v;
    s.rqs[0].vprot = i64::MAX;
    s.rqs[0].buddy = None;
    s.tasks[sib].vruntime = s.tasks[curr].vruntime;
    s.groups.g[0].next = Some(sib as u32);
    s.schedule(0, super::super::state::Why::Tick);
    assert_eq!(s.rqs[0].curr, Some(sib as u32), "the group's next buddy runs");
    assert_eq!(s.rqs[0].vprot, i64::MAX, "the root's protection of VM 0's entity is not restarted");
    assert_eq!(s.groups.g[0].vprot, s.tasks[sib].deadline, "the task's own protection starts");
    check_invariants(&s);
}

/// `Host.group_load_half_life_ns`: `calc_group_shares` reads load
/// averages. A new vCPU thread's average starts at its full weight, so a VM
/// spread over two CPUs weighs half on each from the start; when one of its
/// vCPUs moves to the other CPU, its average moves with it at once, under
/// CFS's groups and EEVDF's alike.
#[test]
fn group_weights_follow_load_averages_that_move_with_their_tasks() {
    for cfs in [false, true] {
        let mut c = vms(&[2, 1], 2, true);
        c.host.group_load_half_life_ns = 32_768_000;
        if cfs {
            c.host.scheduler = Scheduler::Cfs;
            c.host.cfs.vm_groups = true;
        }
        let mut s = sim_of(&c);
        s.step_until(10 * MS).unwrap();
        // VM 0 on CPU 0 and CPU 1: 1024 · 1024 / (1024 + 1024)
        assert_eq!(s.groups.g[0].weight, NICE0 / 2, "cfs {cfs}");
        check_load_averages(&s);
        // VM 0's vCPU on CPU 1, running alone there, is taken off CPU 1 and
        // queued on CPU 0, as a migration moves a task
        let t = s.vcpus[1].task as usize;
        assert_eq!(s.tasks[t].cpu, 1);
        s.rqs[1].curr.take();
        s.queue_add(1, t);
        s.rq_remove_queued(t);
        s.tasks[t].cpu = 0;
        s.tasks[t].pinned = Some(0);
        s.rq_add(t, false);
        check_load_averages(&s);
        // all of VM 0's load average is now on CPU 0, the moved task's with it
        let (a0, a1) = (s.groups.g[0].load_avg, s.groups.g[1].load_avg);
        assert!(a0 > 2000.0 && a1 < 1.0, "cfs {cfs}: {a0} {a1}");
    }
}

/// `dequeue_entities`: a vCPU that halts while its group keeps a runnable
/// sibling on the CPU makes its group the root's next buddy ("Bias
/// pick_next to pick a task from this cfs_rq"), so, eligible, its VM keeps
/// the CPU; the buddy mark survives while that group entity stays the
/// root's curr. Under CFS's groups alike.
#[test]
fn a_halting_vcpu_leaves_its_group_as_the_roots_next_buddy() {
    for cfs in [false, true] {
        let mut c = vms(&[2, 1], 1, true);
        c.host.delay_dequeue = false;
        if cfs {
            c.host.scheduler = Scheduler::Cfs;
            c.host.cfs.vm_groups = true;
        }
        let mut s = sim_of(&c);
        let (curr, sib) = vm0_beside_its_sibling(&mut s);
        // the two VMs' entities level at the root (VM 0's is eligible)
        s.groups.g[1].vruntime = s.groups.g[0].vruntime;
        s.dequeue_sleep(curr);
        assert_eq!(s.rqs[0].buddy, Some(GROUP_ENT), "cfs {cfs}: VM 0's group is the root's next buddy");
        s.schedule(0, super::super::state::Why::Idle);
        assert_eq!(s.rqs[0].curr, Some(sib as u32), "cfs {cfs}: VM 0 keeps the CPU");
        if !cfs {
            assert_eq!(s.rqs[0].buddy, Some(GROUP_ENT), "kept while VM 0's entity stays the root's curr");
            check_invariants(&s);
        }
    }
}
