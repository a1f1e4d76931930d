//! The yield rules (EEVDF's yield_task_fair penalty and its scope, yield_to's boost) on hand-built states.

use super::super::config::*;
use super::super::engine::Sim;
use super::super::state::{ExitKind, TaskKind, Why, C_PLE, NO_TASK};
use crate::sim::test_util::{computing_vm, sim_of};

/// `vms` VMs of `v` vCPUs each, pinned round robin (vCPU g over all VMs on
/// CPU g mod `p`), each vCPU computing forever, under EEVDF with `scope`.
fn rr(vms: u32, v: u32, p: u32, scope: YieldScope) -> Sim {
    let vm = computing_vm(v);
    let c = SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig { n_pcpus: p, affinity: Affinity::RoundRobin, yield_scope: scope, ..Default::default() },
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

// ---- RUN_TO_PARITY (`Host.run_to_parity`) on hand-built states ----

/// Three computing vCPUs on one CPU under EEVDF, `run_to_parity` as given,
/// 10 µs in: (sim, curr, q1, q2) with q2 taken off the queue, asleep.
fn one_cpu_with_a_sleeper(run_to_parity: bool) -> (Sim, usize, usize, usize) {
    let c = SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig { n_pcpus: 1, run_to_parity, ..Default::default() },
        vms: vec![computing_vm(3)],
        ..Default::default()
    };
    let mut s = sim_of(&c);
    s.step_until(10_000).unwrap();
    let cur = s.rqs[0].curr.expect("curr") as usize;
    let (q1, q2) = (s.rqs[0].queue[0] as usize, s.rqs[0].queue[1] as usize);
    s.rq_remove_queued(q2);
    s.tasks[q2].runnable = false;
    s.rqs[0].exec_start = s.now;
    (s, cur, q1, q2)
}

/// Wake `t` so that it is placed at `vruntime` (its virtual lag V − vruntime,
/// its deadline one slice later) and let the wake-up's reschedule, if any,
/// happen.
fn wake(s: &mut Sim, t: usize, vruntime: i64) {
    s.tasks[t].vlag = s.avg_vruntime(0) - vruntime;
    s.enqueue(t);
    assert_eq!(s.tasks[t].vruntime, vruntime);
    let now = s.now;
    s.step_until(now + 1).unwrap();
}

#[test]
fn run_to_parity_keeps_an_eligible_curr_in_its_slice_against_an_earlier_deadline() {
    // curr 3 ms behind q1 (eligible, its slice just begun: vprot = deadline);
    // q2 wakes 3.5 ms behind q1 with the earliest deadline. The earlier rule
    // preempts; check_preempt_wakeup_fair with RUN_TO_PARITY does not
    // (pick_eevdf returns the protected curr).
    for (r2p, preempted) in [(false, true), (true, false)] {
        let (mut s, cur, q1, q2) = one_cpu_with_a_sleeper(r2p);
        let base = s.tasks[q1].vruntime;
        s.tasks[cur].vruntime = base - 3 * MS;
        s.tasks[cur].deadline = s.tasks[cur].vruntime + s.tasks[cur].vslice;
        s.rqs[0].vprot = s.tasks[cur].deadline;
        wake(&mut s, q2, base - 3 * MS - MS / 2);
        assert!(s.eligible(0, cur) && s.eligible(0, q2));
        assert!(s.tasks[q2].deadline < s.tasks[cur].deadline);
        let expect = if preempted { q2 } else { cur };
        assert_eq!(s.rqs[0].curr, Some(expect as u32), "run_to_parity={r2p}");
    }
}

#[test]
fn run_to_parity_lets_the_best_eligible_wakee_preempt_an_ineligible_curr_with_an_earlier_deadline() {
    // curr 1 ms ahead of q1 (ineligible) with half a millisecond of slice
    // left; q2 wakes with the earliest deadline among the eligible tasks but
    // a later one than curr's. pick_eevdf skips the ineligible curr and takes
    // q2; the earlier rule compares with curr's deadline and does not preempt.
    for (r2p, preempted) in [(false, false), (true, true)] {
        let (mut s, cur, q1, q2) = one_cpu_with_a_sleeper(r2p);
        let base = s.tasks[q1].vruntime;
        s.tasks[q1].deadline = base + s.tasks[q1].vslice;
        s.tasks[cur].vruntime = base + MS;
        s.tasks[cur].deadline = base + MS + MS / 2;
        s.rqs[0].vprot = s.tasks[cur].deadline;
        wake(&mut s, q2, base - MS / 2);
        assert!(!s.eligible(0, cur) && s.eligible(0, q2) && s.eligible(0, q1));
        assert!(s.tasks[q2].deadline < s.tasks[q1].deadline);
        assert!(s.tasks[q2].deadline > s.tasks[cur].deadline);
        let expect = if preempted { q2 } else { cur };
        assert_eq!(s.rqs[0].curr, Some(expect as u32), "run_to_parity={r2p}");
    }
}

#[test]
fn an_eligible_next_buddy_goes_before_the_protected_slice() {
    // curr and q1 level (both eligible), q1 with the earlier deadline: the
    // earlier rule picks q1, RUN_TO_PARITY keeps the protected curr; an
    // eligible next buddy is taken before pick_eevdf's protection
    // (PICK_BUDDY in pick_next_entity).
    for r2p in [false, true] {
        let (mut s, cur, q1, _) = one_cpu_with_a_sleeper(r2p);
        let v = s.tasks[q1].vruntime - MS;
        s.queue_remove(0, q1);
        s.tasks[q1].vruntime = v;
        s.queue_add(0, q1);
        s.tasks[cur].vruntime = v;
        s.tasks[cur].deadline = v + s.tasks[cur].vslice;
        s.tasks[q1].deadline = v + s.tasks[q1].vslice / 2;
        s.rqs[0].vprot = s.tasks[cur].deadline;
        assert!(s.eligible(0, cur) && s.eligible(0, q1));
        s.schedule(0, Why::Tick);
        let expect = if r2p { cur } else { q1 };
        assert_eq!(s.rqs[0].curr, Some(expect as u32), "run_to_parity={r2p}");
        if r2p {
            s.rqs[0].buddy = Some(q1 as u32);
            s.schedule(0, Why::Boost);
            assert_eq!(s.rqs[0].curr, Some(q1 as u32), "the eligible buddy goes first");
        }
    }
}

// ---- DELAY_DEQUEUE (`Host.delay_dequeue`) on hand-built states ----

/// Three computing vCPUs on two CPUs under EEVDF with unpinned threads
/// started on CPU g mod 2 (CPU 0: vCPUs 0 and 2, CPU 1: vCPU 1), 10 µs in;
/// vCPU 1 blocks (CPU 1 goes idle) and queued vCPU 2 is taken off CPU 0's
/// queue asleep: (sim, the task of vCPU 2).
fn two_cpus_one_idle(delay_dequeue: bool) -> (Sim, usize) {
    let c = SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig {
            n_pcpus: 2,
            affinity: Affinity::All,
            start_placement: StartPlacement::Index,
            delay_dequeue,
            ..Default::default()
        },
        vms: vec![computing_vm(3)],
        ..Default::default()
    };
    let mut s = sim_of(&c);
    s.step_until(10_000).unwrap();
    // the sleeper first, so that CPU 1's newidle pull finds nothing to take
    let t2 = s.rqs[0].queue[0] as usize;
    s.rq_remove_queued(t2);
    s.tasks[t2].runnable = false;
    let t1 = s.rqs[1].curr.expect("vCPU 1 runs on CPU 1") as usize;
    s.dequeue_sleep(t1);
    s.schedule(1, Why::Halt);
    assert!(s.rqs[1].curr.is_none() && s.rqs[1].queue.is_empty(), "CPU 1 idle");
    (s, t2)
}

#[test]
fn a_task_blocking_with_negative_lag_is_delayed_and_one_with_positive_lag_is_not() {
    for (delay, ahead_ms, delayed) in [(true, 4, true), (true, -4, false), (false, 4, false)] {
        // two computing vCPUs on one CPU: curr `ahead_ms` ahead of the queued
        // one, so V lies halfway and curr's lag is -ahead_ms / 2
        let c = SimConfig {
            duration_ns: 1_000_000_000,
            host: HostConfig { n_pcpus: 1, delay_dequeue: delay, ..Default::default() },
            vms: vec![computing_vm(2)],
            ..Default::default()
        };
        let mut s = sim_of(&c);
        s.step_until(10_000).unwrap();
        let cur = s.rqs[0].curr.expect("curr") as usize;
        let q = s.rqs[0].queue[0] as usize;
        s.rqs[0].exec_start = s.now;
        s.rq_remove_queued(q);
        s.tasks[cur].vruntime = s.tasks[q].vruntime + ahead_ms * MS;
        s.queue_add(0, q);
        s.dequeue_sleep(cur);
        assert_eq!(s.tasks[cur].vlag, -ahead_ms * MS / 2);
        assert_eq!(s.tasks[cur].delayed, delayed, "delay_dequeue {delay}, {ahead_ms} ms ahead");
    }
}

#[test]
fn a_delayed_task_wakes_with_the_lag_it_has_left_and_goes_through_placement() {
    // woken while V has advanced 1 ms of its 2 ms of negative lag: dequeued
    // with -1 ms (DEQUEUE_DELAYED) and placed as any wakee: idle CPU 1
    let (mut s, t) = two_cpus_one_idle(true);
    let v = s.avg_vruntime(0);
    s.tasks[t].delayed = true;
    s.tasks[t].vlag = -2 * MS;
    s.tasks[t].delayed_v = v - MS;
    s.enqueue(t);
    assert_eq!(s.tasks[t].cpu, 1);
    assert_eq!(s.tasks[t].vlag, -MS);
    assert!(!s.tasks[t].delayed);
    // V has gone 3 ms past: it was dequeued at a pick with its lag clipped to
    // 0 (DELAY_ZERO)
    let (mut s, t) = two_cpus_one_idle(true);
    let v = s.avg_vruntime(0);
    s.tasks[t].delayed = true;
    s.tasks[t].vlag = -2 * MS;
    s.tasks[t].delayed_v = v - 3 * MS;
    s.enqueue(t);
    assert_eq!(s.tasks[t].vlag, 0);
    // without the feature a sleeper keeps its whole negative lag
    let (mut s, t) = two_cpus_one_idle(false);
    s.tasks[t].vlag = -2 * MS;
    s.enqueue(t);
    assert_eq!(s.tasks[t].cpu, 1);
    assert_eq!(s.tasks[t].vlag, -2 * MS);
}

// ---- place_entity: `Host.place_lag` and `Host.place_rel_deadline` ----

/// One VM of `v` computing vCPUs on `host`, stepped 10 µs.
fn computing_on(host: HostConfig, v: u32) -> Sim {
    let c = SimConfig { duration_ns: 1_000_000_000, host, vms: vec![computing_vm(v)], ..Default::default() };
    let mut s = sim_of(&c);
    s.step_until(10_000).unwrap();
    s
}

/// Three computing vCPUs on one CPU with `place`: one of the queued two
/// taken off (as a sleep or a migration takes it) with its lag `lag_ns`,
/// and put back; returns the lag it keeps once back on the queue
/// (V − its vruntime).
fn placed_again(place: PlaceLag, lag_ns: i64) -> i64 {
    let mut s = computing_on(HostConfig { n_pcpus: 1, place_lag: place, ..Default::default() }, 3);
    let q = s.rqs[0].queue[1] as usize;
    s.rq_remove_queued(q);
    s.tasks[q].vlag = lag_ns;
    s.rq_add(q, false);
    s.avg_vruntime(0) - s.tasks[q].vruntime
}

#[test]
fn place_lag_kernel_keeps_a_placed_tasks_lag_after_v_moves_for_it() {
    // two entities of 1024 in V, the task 1024: the kernel places it at
    // 2 ms × (2048 + 1024) / 2048 = 3 ms, and V, moving by a third of that
    // as it joins, leaves it 2 ms; the saved rule places it at 2 ms and
    // leaves it 2 ms × 2048 / 3072
    for lag in [2 * MS, -2 * MS] {
        let kept = placed_again(PlaceLag::Kernel, lag);
        assert!((kept - lag).abs() <= 1, "kernel: lag {lag} kept as {kept}");
        let kept = placed_again(PlaceLag::Saved, lag);
        assert!((kept - lag * 2 / 3).abs() <= 1, "saved: lag {lag} kept as {kept}");
    }
}

#[test]
fn place_lag_kernel_drops_the_lag_on_a_queue_with_no_entity() {
    for (place, expect) in [(PlaceLag::Kernel, 0), (PlaceLag::Saved, 2 * MS)] {
        let mut s = computing_on(HostConfig { n_pcpus: 1, place_lag: place, ..Default::default() }, 1);
        let t = s.rqs[0].curr.expect("curr") as usize;
        s.dequeue_sleep(t);
        s.schedule(0, Why::Halt);
        assert!(s.rqs[0].curr.is_none() && s.rqs[0].queue.is_empty(), "the CPU is idle");
        let v = s.avg_vruntime(0);
        s.tasks[t].vlag = 2 * MS;
        s.tasks[t].runnable = true;
        s.rq_add(t, true);
        assert_eq!(v - s.tasks[t].vruntime, expect, "{place:?}");
    }
}

#[test]
fn place_rel_deadline_keeps_a_migrated_tasks_request() {
    // a queued task 1 ms from its deadline (of a 3 ms request) is taken off
    // its queue without sleeping and placed on another CPU, as
    // `detach_task` / `attach_task` move it
    for rel in [true, false] {
        let mut s = computing_on(HostConfig { n_pcpus: 2, place_rel_deadline: rel, ..Default::default() }, 4);
        let q = s.rqs[0].queue[0] as usize;
        s.tasks[q].deadline = s.tasks[q].vruntime + MS;
        s.rq_remove_queued(q);
        assert_eq!(s.tasks[q].rel_deadline, rel);
        s.tasks[q].cpu = 1;
        s.rq_add(q, false);
        let tk = &s.tasks[q];
        assert!(!tk.rel_deadline);
        let want = if rel { MS } else { tk.vslice };
        assert_eq!(tk.deadline - tk.vruntime, want, "place_rel_deadline {rel}");
        // a task that sleeps gets a new request whatever the option
        let t = s.rqs[1].curr.expect("curr") as usize;
        s.dequeue_sleep(t);
        assert!(!s.tasks[t].rel_deadline);
    }
}

#[test]
fn a_yields_boost_does_not_preempt_its_target_once_another_switch_started_it() {
    // 4 vCPUs round robin on 2 CPUs under CFS: vCPU `a` runs on CPU 0, curr
    // `c` and the queued target on CPU 1. The engine decides a yield as the
    // PLE handler begins and reschedules the target's CPU as it ends. If a
    // switch on CPU 1 starts the target in between (here: a pick that
    // honours its next buddy), the handler's end must leave it running: the
    // kernel's yield_to would have found it running. Before 0.3.12 that
    // late resched ran anyway, and with the buddy mark gone the pick gave
    // CPU 1 back to `c`, the leftmost.
    let c = SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig {
            n_pcpus: 2,
            affinity: Affinity::RoundRobin,
            scheduler: Scheduler::Cfs,
            ..Default::default()
        },
        vms: vec![computing_vm(4)],
        ..Default::default()
    };
    for started_meanwhile in [false, true] {
        let mut s = sim_of(&c);
        s.step_until(1_000_000).unwrap();
        let a = vcpu(&s, s.rqs[0].curr.expect("CPU 0 runs a vCPU") as usize);
        let ct = s.rqs[1].curr.expect("CPU 1 runs a vCPU") as usize;
        let tt = s.rqs[1].queue[0] as usize;
        let t = vcpu(&s, tt);
        // the target trails `c` by less than the wake-up granularity: a pick
        // with its next-buddy mark takes it, one without takes `c`
        s.tasks[tt].vruntime = s.tasks[ct].vruntime + 100_000;
        // `a`'s PLE exit, as ple_exit builds it: the yield, then the exit
        s.pause_act(a);
        let mut end = s.now + 1_000;
        assert_eq!(s.yield_to(a, t, &mut end), 1);
        let boost = std::mem::replace(&mut s.wake.boost_task, NO_TASK);
        assert_eq!(boost, tt as u32, "the target waits on another CPU");
        s.start_exit(a, end, ExitKind::Ple { yielded: true, boost }, C_PLE);
        if started_meanwhile {
            s.schedule(1, Why::Yield);
            assert_eq!(s.rqs[1].curr, Some(tt as u32), "the switch honoured the buddy");
        }
        s.step_until(end + 1).unwrap();
        assert_eq!(s.rqs[1].curr, Some(tt as u32), "started meanwhile: {started_meanwhile}");
        assert_ne!(s.rqs[0].curr, Some(s.vcpus[a].task), "the yielder gave CPU 0 up");
    }
}
