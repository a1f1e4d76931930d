//! The guest kernel's wake-up placement (`Guest.wake_placement`) on
//! hand-built states: `select_task_rq_fair`'s `wake_affine`, `wake_wide`,
//! `select_idle_sibling` with `recent_used_cpu`, the LLC, SMT cores and
//! SIS_UTIL's scan limit (kernel/sched/fair.c), against vcpulab's first rule.

use super::super::config::*;
use super::super::engine::Sim;
use crate::sim::run;
use crate::sim::test_util::{computing_vm, sim_of};

/// One VM of `v` vCPUs, one thread per vCPU, with the guest's
/// `select_task_rq_fair` placement on the topology `guest` gives; every
/// vCPU starts busy (a current thread), none preempted.
fn guest(v: u32, edit: impl FnOnce(&mut GuestConfig)) -> Sim {
    let mut vm = computing_vm(v);
    vm.guest.wake_placement = GuestWakePlacement::SelectTaskRqFair;
    edit(&mut vm.guest);
    let c = SimConfig { host: HostConfig { n_pcpus: v, ..Default::default() }, vms: vec![vm], ..Default::default() };
    let mut s = sim_of(&c);
    for c in 0..v as usize {
        let vc = &mut s.vcpus[c];
        vc.runq.clear();
        vc.cur = Some(c as u32);
        vc.st_preempted = false;
    }
    s
}

/// Make vCPU `c` idle (no thread running or waiting).
fn idle(s: &mut Sim, c: usize) {
    s.vcpus[c].cur = None;
    s.vcpus[c].runq.clear();
}

/// Queue `n` more threads on vCPU `c` (its load: 1 + n).
fn queue(s: &mut Sim, c: usize, n: u32) {
    for k in 0..n {
        s.vcpus[c].runq.push_back(100 + k);
    }
}

/// Where thread `t` (previous vCPU `prev`, recently used `recent`) goes
/// when thread `waker` (on its own vCPU) wakes it.
fn wake(s: &mut Sim, t: usize, prev: usize, recent: usize, waker: Option<usize>) -> usize {
    s.threads[t].vcpu = prev as u32;
    s.threads[t].recent_used_cpu = recent as u32;
    s.guest_select_task_rq_fair(0, t, prev, waker)
}

#[test]
fn select_idle_sibling_takes_the_target_then_prev_then_recent_then_scans_from_the_target() {
    // no wake_wide, no scan limit (SIS_UTIL's is tested below: with 6 of 8
    // vCPUs busy it looks at one vCPU)
    let no_wide = |g: &mut GuestConfig| {
        g.wake_wide = false;
        g.idle_scan = IdleScan::Full;
    };
    // prev idle: wake_affine_idle keeps the thread there
    let mut s = guest(8, no_wide);
    idle(&mut s, 2);
    idle(&mut s, 6);
    assert_eq!(wake(&mut s, 0, 2, 6, Some(5)), 2);
    // prev and waker each run one thread: wake_affine_weight keeps prev
    // (this 2 x 100 against prev 1 x 108); prev is busy, recent is idle
    let mut s = guest(8, no_wide);
    idle(&mut s, 6);
    idle(&mut s, 4);
    assert_eq!(wake(&mut s, 0, 2, 6, Some(5)), 6);
    assert_eq!(s.threads[0].recent_used_cpu, 2, "the search went past prev: recent_used_cpu = prev");
    // recent busy: the scan from target + 1 finds 4 (vCPU 1 comes later)
    let mut s = guest(8, no_wide);
    idle(&mut s, 1);
    idle(&mut s, 4);
    assert_eq!(wake(&mut s, 0, 2, 6, Some(5)), 4);
    // a loaded prev (3 threads) against the waker's 1: wake_affine_weight
    // takes the waker's vCPU as target (200 < 324), and the scan starts
    // after it, wrapping: 6, 7, 0, 1 -> 1; vcpulab's first rule scans from
    // prev and takes 4
    let mut s = guest(8, no_wide);
    idle(&mut s, 1);
    idle(&mut s, 4);
    queue(&mut s, 2, 2);
    assert_eq!(wake(&mut s, 0, 2, 2, Some(5)), 1);
    assert_eq!(s.place(0, 2), 4, "first_idle scans from prev");
    // nothing available: the target (the waker's vCPU), not prev
    let mut s = guest(8, no_wide);
    queue(&mut s, 2, 2);
    assert_eq!(wake(&mut s, 0, 2, 2, Some(5)), 5);
    assert_eq!(s.place(0, 2), 2, "first_idle falls back to prev");
    // a timer wake-up (no waker) is placed around prev
    let mut s = guest(8, no_wide);
    queue(&mut s, 2, 2);
    idle(&mut s, 1);
    assert_eq!(wake(&mut s, 0, 2, 2, None), 1);
}

#[test]
fn a_preempted_idle_vcpu_is_not_available_and_the_rfc_reads_the_is_idle_byte() {
    let mut s = guest(4, |_| {});
    idle(&mut s, 1);
    s.vcpus[1].st_preempted = true;
    assert_eq!(wake(&mut s, 0, 1, 1, None), 1, "nothing available: the target");
    idle(&mut s, 3);
    assert_eq!(wake(&mut s, 0, 1, 1, None), 3, "available_idle_cpu refuses preempted vCPU 1");
    // the RFC: available_idle_cpu_sched = idle && the is_idle byte
    let mut vm = computing_vm(4);
    vm.guest.wake_placement = GuestWakePlacement::SelectTaskRqFair;
    vm.pv.placement = Placement::PcpuIsIdleRfc;
    let c = SimConfig { host: HostConfig { n_pcpus: 4, ..Default::default() }, vms: vec![vm], ..Default::default() };
    let mut r = sim_of(&c);
    for c in 0..4 {
        r.vcpus[c].runq.clear();
        r.vcpus[c].cur = Some(c as u32);
        r.vcpus[c].st_is_idle = false;
    }
    idle(&mut r, 1);
    idle(&mut r, 3);
    r.vcpus[1].st_preempted = true;
    r.vcpus[1].st_is_idle = true;
    assert_eq!(wake(&mut r, 0, 1, 1, None), 1, "no preemption question, the byte says idle");
    r.vcpus[1].st_is_idle = false;
    assert_eq!(wake(&mut r, 0, 1, 1, None), 1, "byte clear on both: the target");
    r.vcpus[3].st_is_idle = true;
    assert_eq!(wake(&mut r, 0, 1, 1, None), 3);
}

#[test]
fn the_scan_stays_in_the_target_s_llc() {
    // two LLCs of 4 vCPUs: the only idle vCPU is in the other LLC (no scan
    // limit: SIS_UTIL would not scan a 7/8 busy VM at all)
    let mut s = guest(8, |g| {
        g.llc_vcpus = 4;
        g.idle_scan = IdleScan::Full;
    });
    idle(&mut s, 6);
    assert_eq!(wake(&mut s, 0, 1, 1, None), 1, "select_idle_sibling looks in prev's LLC only");
    assert_eq!(s.place(0, 1), 6, "first_idle scans the whole VM");
    // one LLC: found
    let mut s = guest(8, |g| g.idle_scan = IdleScan::Full);
    idle(&mut s, 6);
    assert_eq!(wake(&mut s, 0, 1, 1, None), 6);
}

#[test]
fn sis_util_stops_the_scan_as_the_llc_fills_and_full_scans_it_all() {
    // 16 vCPUs, 11 busy (0-10): x = 11 * 1024 / 16 = 704, y = 1024 - 704^2 *
    // 117^2 / (10000 * 1024) = 362, nr_idle_scan = 16 * 362 / 1024 = 5:
    // vCPUs 1-5, all busy
    let setup = |scan: IdleScan| {
        let mut s = guest(16, |g| g.idle_scan = scan);
        for c in 11..16 {
            idle(&mut s, c);
        }
        s
    };
    let mut s = setup(IdleScan::SisUtil);
    assert_eq!(wake(&mut s, 0, 0, 0, None), 0);
    let mut s = setup(IdleScan::Full);
    assert_eq!(wake(&mut s, 0, 0, 0, None), 11);
    // 8 busy (0-7): x = 512, y = 674, nr = 10: vCPU 8 is within reach
    let mut s = guest(16, |_| {});
    for c in 8..16 {
        idle(&mut s, c);
    }
    assert_eq!(wake(&mut s, 0, 0, 0, None), 8);
}

#[test]
fn wake_wide_keeps_the_wakee_near_its_previous_vcpu() {
    // the waker's vCPU is lightly loaded, prev heavily: wake_affine would
    // take the waker's; a waker with many flips (>= llc_size x the wakee's,
    // the wakee's >= llc_size) is wake_wide and the target stays prev
    let mut s = guest(8, |_| {});
    queue(&mut s, 2, 3);
    assert_eq!(wake(&mut s, 0, 2, 2, Some(5)), 5, "wake_affine_weight: the waker's vCPU");
    let mut s = guest(8, |_| {});
    queue(&mut s, 2, 3);
    s.threads[5].wakee.flips = 64;
    s.threads[0].wakee.flips = 8;
    s.threads[5].wakee.decay_ts = s.now;
    assert_eq!(wake(&mut s, 0, 2, 2, Some(5)), 2, "wake_wide: prev");
    // with wake_wide off the flips do not matter
    let mut s = guest(8, |g| g.wake_wide = false);
    queue(&mut s, 2, 3);
    s.threads[5].wakee.flips = 64;
    s.threads[0].wakee.flips = 8;
    assert_eq!(wake(&mut s, 0, 2, 2, Some(5)), 5);
    // record_wakee counts a flip per change of wakee
    let mut s = guest(8, |_| {});
    let f0 = s.threads[5].wakee.flips;
    for t in [0, 1, 1, 0] {
        wake(&mut s, t, t, t, Some(5));
    }
    assert_eq!(s.threads[5].wakee.flips, f0 + 3);
}

#[test]
fn with_guest_smt_an_idle_core_comes_before_an_idle_sibling_of_a_busy_core() {
    // cores (0,1) (2,3) (4,5) (6,7); vCPU 3 idle beside a busy 2, core (6,7) idle
    let setup = |smt: u32| {
        let mut s = guest(8, |g| g.threads_per_core = smt);
        idle(&mut s, 3);
        idle(&mut s, 6);
        idle(&mut s, 7);
        s
    };
    let mut s = setup(2);
    assert_eq!(wake(&mut s, 0, 0, 0, None), 6, "select_idle_core");
    let mut s = setup(1);
    assert_eq!(wake(&mut s, 0, 0, 0, None), 3, "no SMT: the first idle vCPU");
    // no idle core: select_idle_smt takes prev's idle sibling
    let mut s = guest(8, |g| g.threads_per_core = 2);
    idle(&mut s, 1);
    idle(&mut s, 4);
    assert_eq!(wake(&mut s, 0, 0, 0, None), 1);
}

#[test]
fn a_guest_topology_that_does_not_fit_the_vm_is_refused() {
    let cfg = |edit: &dyn Fn(&mut GuestConfig)| {
        let mut vm = computing_vm(8);
        edit(&mut vm.guest);
        SimConfig { vms: vec![vm], ..Default::default() }
    };
    assert!(cfg(&|_| {}).validate().is_ok());
    assert!(cfg(&|g| g.llc_vcpus = 4).validate().is_ok());
    let e = cfg(&|g| g.llc_vcpus = 3).validate().unwrap_err();
    assert!(e.contains("guest.llc_vcpus"), "{e}");
    let e = cfg(&|g| g.threads_per_core = 3).validate().unwrap_err();
    assert!(e.contains("guest.threads_per_core"), "{e}");
    let e = cfg(&|g| g.threads_per_core = 0).validate().unwrap_err();
    assert!(e.contains("guest.threads_per_core"), "{e}");
    let e = cfg(&|g| {
        g.threads_per_core = 2;
        g.llc_vcpus = 2 + 1;
    })
    .validate()
    .unwrap_err();
    assert!(e.contains("guest.llc_vcpus"), "{e}");
}

#[test]
fn a_run_with_the_kernel_s_placement_differs_from_the_first_rule_and_is_reproducible() {
    // 8 threads on 8 vCPUs sharing 4 host CPUs, a lock and a barrier per
    // iteration: every wake-up goes through the guest's placement
    let mut vm = computing_vm(8);
    vm.threads = 12;
    vm.workload.phases = vec![
        Phase::Compute { ns: 200_000, dist: Dist::Exp, mode: Mode::User, prob: 1.0 },
        Phase::Lock {
            lock: 0,
            lock_kind: LockKind::Mutex,
            hold_ns: 20_000,
            dist: Dist::Fixed,
            prob: 1.0,
            sites: 1,
            irqs_off: false,
        },
        Phase::Barrier { prob: 1.0 },
    ];
    let mut c = SimConfig {
        duration_ns: 100_000_000,
        host: HostConfig { n_pcpus: 4, ..Default::default() },
        vms: vec![vm],
        ..Default::default()
    };
    let base = run(&c).unwrap();
    c.vms[0].guest.wake_placement = GuestWakePlacement::SelectTaskRqFair;
    let a = run(&c).unwrap();
    assert_eq!(a, run(&c).unwrap(), "same seed, same run");
    assert!(a.summary.u64s("ops")[0] > 0);
    assert_ne!(a.vcpus, base.vcpus, "the placement rule changes the run");
}

#[test]
fn a_bound_thread0_stays_on_vcpu0_at_wake_up_and_in_load_balancing() {
    // vCPU 0 runs thread 1 and vCPU 1 is idle: the first rule would move a
    // woken thread 0 to vCPU 1; bound, it queues on vCPU 0
    let build = |bound: bool| {
        let mut vm = computing_vm(2);
        vm.workload.thread0_bound = bound;
        vm.guest.load_balance = true;
        vm.guest.migration_cost_ns = 0;
        let c =
            SimConfig { host: HostConfig { n_pcpus: 2, ..Default::default() }, vms: vec![vm], ..Default::default() };
        let mut s = sim_of(&c);
        for c in 0..2 {
            s.vcpus[c].runq.clear();
            s.vcpus[c].cur = None;
            s.vcpus[c].st_preempted = false;
        }
        s.vcpus[0].cur = Some(1);
        s.threads[1].vcpu = 0;
        s.threads[0].vcpu = 0;
        s
    };
    let mut free = build(false);
    free.wake_thread(0, crate::sim::state::WakeReason::Timer, None);
    assert_eq!(free.threads[0].vcpu, 1, "unbound: the first idle vCPU from prev");
    let mut bound = build(true);
    bound.wake_thread(0, crate::sim::state::WakeReason::Timer, None);
    assert_eq!(bound.threads[0].vcpu, 0, "bound: stays on vCPU 0");
    assert_eq!(bound.vcpus[0].runq.iter().copied().collect::<Vec<_>>(), vec![0]);
    // idle vCPU 1 looks for a waiting thread to pull: only thread 0 waits, and it is bound
    assert_eq!(bound.guest_busiest_thread(0, 1), None);
    let mut free2 = build(false);
    free2.vcpus[0].runq.push_back(0);
    assert_eq!(free2.guest_busiest_thread(0, 1), Some((0, 0)), "unbound, the waiting thread 0 would be pulled");
}
