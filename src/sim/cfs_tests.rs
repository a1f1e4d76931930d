//! The CFS rules, the host noise and the wake-up latencies on hand-built states.

use super::super::config::*;
use super::super::engine::Sim;
use super::super::run;
use super::super::state::{TaskKind, Why, NICE0};
use crate::sim::test_util::{computing_vm, kthread_and_io_noise, pcpu_time, sim_of};

/// 1 VM of `v` vCPUs pinned round-robin on `p` CPUs, each with a thread
/// that computes forever, under `scheduler`.
fn rr(v: u32, p: u32, scheduler: Scheduler) -> SimConfig {
    SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig { n_pcpus: p, affinity: Affinity::RoundRobin, scheduler, ..Default::default() },
        vms: vec![computing_vm(v)],
        ..Default::default()
    }
}

const MS: i64 = 1_000_000;

/// 8 CPUs, CPU 0 holding the tasks of vCPUs 0, 8 and 16 (curr and two
/// queued), just after they started.
fn three_on_cpu0() -> (Sim, usize, usize, usize) {
    let mut s = sim_of(&rr(17, 8, Scheduler::Cfs));
    s.step_until(10_000).unwrap();
    let curr = s.rqs[0].curr.expect("curr") as usize;
    let mut q: Vec<usize> = s.rqs[0].queue.iter().map(|&t| t as usize).collect();
    q.sort();
    assert_eq!(q.len(), 2);
    (s, curr, q[0], q[1])
}

#[test]
fn tunables_scale_with_ilog2_of_the_cpus_capped_at_8() {
    let c = CfsConfig::default();
    let f: Vec<u64> = [1, 2, 3, 4, 7, 8, 80, 4096].iter().map(|&n| c.factor(n)).collect();
    assert_eq!(f, vec![1, 2, 2, 3, 3, 4, 4, 4]);
    let lin = CfsConfig { tunable_scaling: TunableScaling::Linear, ..Default::default() };
    assert_eq!(lin.factor(80), 8);
    let s = sim_of(&rr(17, 8, Scheduler::Cfs));
    assert_eq!(
        (s.cfs.latency_ns, s.cfs.min_granularity_ns, s.cfs.wakeup_granularity_ns),
        (24_000_000, 3_000_000, 4_000_000)
    );
}

#[test]
fn wakeup_preempt_entity_threshold_is_the_wakeup_granularity_in_the_wakees_virtual_time() {
    let (mut s, c, a, _) = three_on_cpu0();
    s.tasks[c].vruntime = 100 * MS;
    // gran = 4 ms (1 ms × 4 on 8 CPUs) for a nice-0 wakee
    for (va, want) in [(100 * MS, -1), (101 * MS, -1), (96 * MS, 0), (96 * MS - 1, 1), (90 * MS, 1)] {
        s.tasks[a].vruntime = va;
        assert_eq!(s.cfs_wakeup_preempt_entity(c, a), want, "wakee at {va}");
    }
    // a heavier wakee (weight 2048) has half the granularity in virtual time
    s.tasks[a].weight = 2 * NICE0;
    s.tasks[a].vruntime = 98 * MS - 1;
    assert_eq!(s.cfs_wakeup_preempt_entity(c, a), 1);
    s.tasks[a].vruntime = 98 * MS;
    assert_eq!(s.cfs_wakeup_preempt_entity(c, a), 0);
}

#[test]
fn pick_takes_the_leftmost_then_honours_next_and_last_buddies_within_the_granularity() {
    let (mut s, c, a, b) = three_on_cpu0();
    s.tasks[c].vruntime = 10 * MS;
    s.tasks[a].vruntime = 5 * MS;
    s.tasks[b].vruntime = 8 * MS;
    assert_eq!(s.cfs_pick(0), Some(a), "leftmost");
    // next buddy b: 3 ms right of the leftmost (< 4 ms gran) → b
    s.rqs[0].buddy = Some(b as u32);
    assert_eq!(s.cfs_pick(0), Some(b), "next buddy within gran");
    assert_eq!(s.rqs[0].buddy, None, "the picked buddy is cleared");
    // 5 ms right (> gran): not fair enough → leftmost, buddy kept
    s.tasks[b].vruntime = 10 * MS;
    s.rqs[0].buddy = Some(b as u32);
    assert_eq!(s.cfs_pick(0), Some(a));
    assert_eq!(s.rqs[0].buddy, Some(b as u32));
    // next buddy too far, last buddy (curr, 5 ms right) too far as well; then within gran
    s.rqs[0].last = Some(c as u32);
    assert_eq!(s.cfs_pick(0), Some(a));
    s.tasks[c].vruntime = 8 * MS;
    assert_eq!(s.cfs_pick(0), Some(c), "last buddy within gran when the next buddy is not");
    assert_eq!(s.rqs[0].last, None);
    // next beats last when both qualify
    s.tasks[b].vruntime = 6 * MS;
    s.rqs[0].buddy = Some(b as u32);
    s.rqs[0].last = Some(c as u32);
    assert_eq!(s.cfs_pick(0), Some(b));
}

#[test]
fn pick_avoids_the_skip_buddy_unless_that_is_too_unfair() {
    let (mut s, c, a, b) = three_on_cpu0();
    s.tasks[c].vruntime = 20 * MS;
    s.tasks[a].vruntime = 5 * MS;
    s.tasks[b].vruntime = 8 * MS;
    s.rqs[0].skip = Some(a as u32);
    assert_eq!(s.cfs_pick(0), Some(b), "second leftmost is 3 ms right: within gran");
    s.rqs[0].skip = Some(a as u32);
    s.tasks[b].vruntime = 9 * MS + 1;
    assert_eq!(s.cfs_pick(0), Some(a), "second is more than gran right: the skip buddy runs");
    // curr is the skip buddy and leftmost: the queue's leftmost replaces it
    s.tasks[c].vruntime = 4 * MS;
    s.tasks[b].vruntime = 30 * MS;
    s.rqs[0].skip = Some(c as u32);
    assert_eq!(s.cfs_pick(0), Some(a));
}

#[test]
fn check_preempt_tick_ends_a_slice_of_latency_over_nr_running() {
    let (mut s, c, a, b) = three_on_cpu0();
    // 3 nice-0 tasks: slice = 24 ms / 3 = 8 ms
    assert_eq!(s.cfs_sched_slice(0, c), 8_000_000);
    // sched_nr_latency = 8: above it the period is nr × min_gran (3 ms floor per task)
    s.tasks[a].vruntime = s.tasks[c].vruntime;
    s.tasks[b].vruntime = s.tasks[c].vruntime;
    s.rqs[0].slice_start = s.now;
    s.cfs_tick(0, c);
    assert_eq!(s.rqs[0].curr, Some(c as u32), "no preemption inside the slice");
    s.now += 8_000_001;
    s.rqs[0].exec_start = s.now;
    s.cfs_tick(0, c);
    assert_ne!(s.rqs[0].curr, Some(c as u32), "slice used up: rescheduled");
}

#[test]
fn check_preempt_tick_compares_with_the_leftmost_after_min_granularity() {
    let (mut s, c, a, b) = three_on_cpu0();
    s.tasks[c].vruntime = 50 * MS;
    s.tasks[a].vruntime = 41 * MS; // 9 ms left of curr: more than the 8 ms slice
    s.tasks[b].vruntime = 60 * MS;
    s.rqs[0].slice_start = s.now;
    s.now += 2_000_000; // < min_gran (3 ms): no check
    s.rqs[0].exec_start = s.now;
    s.cfs_tick(0, c);
    assert_eq!(s.rqs[0].curr, Some(c as u32));
    s.now += 2_000_000; // 4 ms ran: delta 9 ms + 4 ms > slice
    s.cfs_tick(0, c);
    assert_eq!(s.rqs[0].curr, Some(a as u32));
}

#[test]
fn place_entity_gives_half_a_latency_of_sleeper_credit() {
    let (mut s, _, a, _) = three_on_cpu0();
    s.rqs[0].min_vruntime = 100 * MS;
    s.tasks[a].vruntime = 10 * MS;
    s.cfs_place(0, a, 0, true);
    assert_eq!(s.tasks[a].vruntime, 88 * MS, "min_vruntime - 24 ms / 2");
    s.tasks[a].vruntime = 95 * MS;
    s.cfs_place(0, a, 0, true);
    assert_eq!(s.tasks[a].vruntime, 95 * MS, "never placed backwards");
    // migration renormalises from the old CPU's min_vruntime
    s.rqs[1].min_vruntime = 500 * MS;
    s.tasks[a].vruntime = 95 * MS;
    s.cfs_place(1, a, 0, false);
    assert_eq!(s.tasks[a].vruntime, 495 * MS);
    s.cfg.host.cfs.gentle_fair_sleepers = false;
    s.tasks[a].vruntime = 0;
    s.cfs_place(0, a, 0, true);
    assert_eq!(s.tasks[a].vruntime, 76 * MS);
}

#[test]
fn yield_to_sets_the_next_buddy_on_the_target_and_the_skip_buddy_on_the_yielder() {
    let (mut s, c, a, _) = three_on_cpu0();
    // vCPU of `c` yields to the queued task `a` (same CPU)
    let TaskKind::Vcpu(me) = s.tasks[c].kind else { panic!() };
    let TaskKind::Vcpu(tg) = s.tasks[a].kind else { panic!() };
    let mut t = s.now;
    assert_eq!(s.yield_to(me as usize, tg as usize, &mut t), 1);
    assert_eq!(s.rqs[0].buddy, Some(a as u32));
    assert_eq!(s.rqs[0].skip, Some(c as u32));
    s.tasks[c].vruntime = 0;
    s.tasks[a].vruntime = 3 * MS; // within gran of the leftmost (the yielder)
    assert_eq!(s.cfs_pick(0), Some(a));
}

#[test]
fn wake_up_preemption_sets_the_last_buddy_only_from_sched_nr_latency_tasks() {
    let (mut s, c, a, _) = three_on_cpu0();
    s.tasks[c].vruntime = 50 * MS;
    s.tasks[a].vruntime = 40 * MS;
    assert!(s.cfs_check_preempt_wakeup(0, a, c));
    assert_eq!(s.rqs[0].last, None, "3 < sched_nr_latency (8)");
    s.tasks[a].vruntime = 47 * MS;
    assert!(!s.cfs_check_preempt_wakeup(0, a, c), "3 ms: within the wake-up granularity");
}

#[test]
fn cfs_shares_a_cpu_fairly_and_conserves_time() {
    for sched in [Scheduler::Cfs, Scheduler::Fair] {
        let mut c = rr(3, 1, sched);
        c.duration_ns = 240_000_000;
        let r = run(&c).unwrap();
        let useful = r.vcpus.u64s("useful_ns");
        let (lo, hi) = (*useful.iter().min().unwrap(), *useful.iter().max().unwrap());
        assert!(lo > 70_000_000 && hi < 90_000_000, "{sched:?}: {useful:?}");
        let v = &r.vcpus;
        for i in 0..3 {
            assert_eq!(v.u64s("running_ns")[i] + v.u64s("wait_ns")[i] + v.u64s("halted_ns")[i], c.duration_ns);
        }
    }
}

#[test]
fn skewed_ticks_follow_skew_tick_offsets() {
    let mut c = rr(8, 8, Scheduler::Fair);
    c.host.tick_skew = true;
    let s = sim_of(&c);
    // (4 ms >> 1) / 8 CPUs = 250 µs per CPU
    let offs: Vec<u64> = s.rqs.iter().map(|r| r.tick_off).collect();
    assert_eq!(offs, (0..8).map(|i| i * 250_000).collect::<Vec<u64>>());
}

#[test]
fn a_woken_vcpu_reaches_an_idle_cpu_after_the_ipi_and_idle_exit_latency() {
    let mut c = rr(1, 1, Scheduler::Fair);
    c.trace = true;
    c.host.wakeup_ipi_ns = 1_500;
    c.host.idle_states = vec![(2_000, 2_000), (133_000, 600_000)];
    let r = run(&c).unwrap();
    // at t=0 the CPU has been idle for 0 ns: no idle state deep enough, the IPI only
    assert_eq!(r.trace.as_ref().unwrap().u64s("start_ns")[0], 1_500);
    let mut s = sim_of(&c);
    s.step_until(10_000).unwrap();
    s.rqs[0].idle_since = 0;
    s.now = 700_000;
    assert_eq!(s.wake_delay(0, true), 1_500 + 133_000, "idle 700 µs: the deep state");
    s.now = 10_000;
    assert_eq!(s.wake_delay(0, true), 1_500 + 2_000);
    assert_eq!(s.wake_delay(0, false), 1_500, "a busy CPU: the IPI only");
    s.cfg.host.wakeup_jitter = 0.5;
    for _ in 0..100 {
        let d = s.wake_delay(0, false);
        assert!((750..=2_250).contains(&d), "{d}");
    }
    // log-normal: the value is the median, the log's standard deviation j, a right tail, a cap
    s.cfg.host.wakeup_dist = WakeupDist::Lognormal;
    s.cfg.host.wakeup_jitter = 0.3;
    let mut d: Vec<f64> = (0..20_000).map(|_| s.wake_delay(0, false) as f64).collect();
    d.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| d[(p * (d.len() - 1) as f64) as usize];
    assert!((q(0.5) / 1_500.0 - 1.0).abs() < 0.02, "median {}", q(0.5));
    // exp(±1.2816 × 0.3): p10 0.681, p90 1.469 of the median
    assert!(
        (q(0.1) / 1_500.0 - 0.681).abs() < 0.02 && (q(0.9) / 1_500.0 - 1.469).abs() < 0.03,
        "{} {}",
        q(0.1),
        q(0.9)
    );
    assert!(q(0.9) - q(0.5) > q(0.5) - q(0.1), "a right tail");
    s.cfg.host.wakeup_jitter = 1.0;
    assert!((0..20_000).all(|_| s.wake_delay(0, false) <= 50 * 1_500), "capped at 50x");
}

#[test]
fn host_noise_uses_its_share_of_each_cpu_and_kthreads_stay_home() {
    let mut c = rr(4, 4, Scheduler::Fair);
    c.vms[0].workload.phases = vec![Phase::Sleep { ns: 1_000_000_000, dist: Dist::Fixed, prob: 1.0, periodic: false }];
    c.duration_ns = 2_000_000_000;
    c.trace = true;
    c.host.noise =
        HostNoise { kthread_hz: 1000.0, kthread_ns: 20_000, vmm_io_hz: 0.0, vmm_io_ns: 20_000, ..Default::default() };
    let r = run(&c).unwrap();
    let bg = r.pcpus.u64s("bg_ns");
    for (cpu, &b) in bg.iter().enumerate() {
        // 1000 Hz × 20 µs = 2 % of 2 s = 40 ms (Poisson: ±15 %)
        assert!((34_000_000..46_000_000).contains(&b), "cpu {cpu}: {b}");
    }
    let s = sim_of(&c);
    let noise: Vec<_> = s.tasks.iter().filter(|t| matches!(t.kind, TaskKind::Noise(_))).collect();
    assert_eq!(noise.len(), 4);
    assert!(noise.iter().enumerate().all(|(i, t)| t.pinned == Some(i as u32)));
}

#[test]
fn every_option_on_keeps_time_conserved_and_runs_deterministic() {
    for sched in [Scheduler::Fair, Scheduler::Cfs] {
        let mut c = super::super::tests::small(PolicyKind::Upstream, 3, 4, 4);
        c.host.scheduler = sched;
        c.host.affinity = Affinity::All;
        c.host.tick_skew = true;
        c.host.seeded_ties = true;
        c.host.wakeup_ipi_ns = 1_500;
        c.host.wakeup_jitter = 0.5;
        c.host.idle_states = vec![(2_000, 2_000), (10_000, 20_000), (133_000, 600_000)];
        c.host.noise = kthread_and_io_noise();
        let a = run(&c).unwrap();
        assert_eq!(a, run(&c).unwrap());
        let d = c.duration_ns;
        let p = &a.pcpus;
        for i in 0..4 {
            assert_eq!(pcpu_time(&a, i), d);
            assert!(p.u64s("bg_ns")[i] > 0, "noise ran on cpu {i}");
        }
        assert!(a.summary.u64s("ops")[0] > 0);
        let _ = Why::Tick;
    }
}
