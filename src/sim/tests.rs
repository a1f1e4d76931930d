//! Engine-level tests: determinism, conservation, kernel rules on live runs.

use super::config::*;
use super::*;

pub(crate) fn small(policy: PolicyKind, vms: u32, vcpus: u32, pcpus: u32) -> SimConfig {
    SimConfig {
        duration_ns: 20_000_000,
        host: HostConfig { n_pcpus: pcpus, ..Default::default() },
        vms: vec![VmConfig {
            count: vms,
            vcpus,
            policy: PolicyConfig { kind: policy, ..Default::default() },
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn conservation(r: &SimResult, dur: u64) {
    let d = r.summary.u64s("duration_ns")[0];
    assert_eq!(d, dur.min(d));
    let p = &r.pcpus;
    for i in 0..p.u64s("pcpu").len() {
        assert_eq!(super::test_util::pcpu_time(r, i), d, "pcpu {i}");
    }
    let v = &r.vcpus;
    for i in 0..v.u64s("vcpu").len() {
        let s = v.u64s("running_ns")[i] + v.u64s("wait_ns")[i] + v.u64s("halted_ns")[i];
        assert_eq!(s, d, "vcpu {i}");
    }
}

#[test]
fn smoke_and_conservation() {
    for kind in [
        PolicyKind::NoYield,
        PolicyKind::Baseline2011,
        PolicyKind::DyEligible,
        PolicyKind::Upstream,
        PolicyKind::Random,
        PolicyKind::Oracle,
    ] {
        let c = small(kind, 2, 4, 4);
        let r = run(&c).unwrap();
        conservation(&r, c.duration_ns);
        assert!(r.summary.u64s("ops")[0] > 0, "{kind:?}");
    }
}

#[test]
fn same_seed_same_result_other_seed_differs() {
    let c = small(PolicyKind::Upstream, 2, 4, 4);
    let a = run(&c).unwrap();
    let b = run(&c).unwrap();
    assert_eq!(a, b);
    let mut c2 = c.clone();
    c2.seed = 1;
    let d = run(&c2).unwrap();
    assert_ne!(a.vcpus, d.vcpus);
}

#[test]
fn sweep_is_thread_count_independent() {
    let cfgs: Vec<SimConfig> = (0..4)
        .map(|s| {
            let mut c = small(PolicyKind::Upstream, 2, 4, 4);
            c.seed = s;
            c
        })
        .collect();
    let none = |_: usize, _: usize, _: &VmConfig| -> Result<Box<dyn DirectedYieldPolicy>, String> {
        Err("no external".into())
    };
    let a = sweep::sweep(&cfgs, 1, &none, &|_| {});
    let b = sweep::sweep(&cfgs, 2, &none, &|_| {});
    assert_eq!(a, b);
}

#[test]
fn a_sweep_returns_each_points_own_result_in_its_order() {
    // ascending sizes, so the order of work (largest first) is not the sweep's
    let cfgs: Vec<SimConfig> = [2u32, 4, 8]
        .iter()
        .map(|&v| {
            let mut c = small(PolicyKind::Upstream, 2, v, 4);
            c.duration_ns = 2_000_000;
            c
        })
        .collect();
    let none = |_: usize, _: usize, _: &VmConfig| -> Result<Box<dyn DirectedYieldPolicy>, String> {
        Err("no external".into())
    };
    for threads in [1, 2] {
        let out = sweep::sweep(&cfgs, threads, &none, &|_| {});
        for (c, r) in cfgs.iter().zip(&out) {
            // compared as text: a VM with no operation has NaN latencies, and NaN != NaN
            let alone = format!("{:?}", crate::sim::run(c).unwrap());
            assert_eq!(format!("{:?}", r.as_ref().unwrap()), alone, "{threads} threads");
        }
    }
}

#[test]
fn an_interrupted_sweep_starts_no_further_point() {
    // the interrupt fires as the first point ends: no later point may start
    let cfgs: Vec<SimConfig> = (0..6)
        .map(|s| {
            let mut c = small(PolicyKind::Upstream, 2, 4, 4);
            c.seed = s;
            c
        })
        .collect();
    let none = |_: usize, _: usize, _: &VmConfig| -> Result<Box<dyn DirectedYieldPolicy>, String> {
        Err("no external".into())
    };
    let fired = std::sync::atomic::AtomicBool::new(false);
    let progress = |_: usize| fired.store(true, std::sync::atomic::Ordering::SeqCst);
    let check = || fired.load(std::sync::atomic::Ordering::SeqCst);
    let out = sweep::sweep_checked(&cfgs, 1, &none, &progress, &check);
    assert!(out[0].is_ok(), "{:?}", out[0].as_ref().err());
    assert!(out[1..].iter().all(|r| matches!(r, Err(SimError::Interrupted))));
}

// ---------------------------------------------------------------- kernel rules

use super::state::Why;
use crate::sim::test_util::{computing_vm, sim_of};

/// 1 VM, `v` vCPUs pinned round-robin on `p` CPUs, `threads` threads that
/// compute forever (or sleep, so that thread-less vCPUs halt).
fn rr(v: u32, p: u32, threads: u32) -> SimConfig {
    SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig { n_pcpus: p, affinity: Affinity::RoundRobin, ..Default::default() },
        vms: vec![VmConfig { threads, ..computing_vm(v) }],
        ..Default::default()
    }
}

#[test]
fn yield_to_returns_esrch_when_both_queues_hold_one_task() {
    let mut s = sim_of(&rr(2, 2, 0));
    s.step_until(10_000).unwrap();
    assert!(s.vcpus[0].running.is_some() && s.vcpus[1].running.is_some());
    let mut t = s.now;
    assert_eq!(s.yield_to(0, 1, &mut t), ESRCH);
}

#[test]
fn yield_to_returns_zero_for_a_running_or_sleeping_target_and_one_on_success() {
    // v0, v2 share CPU 0; v1 has CPU 1.
    let mut s = sim_of(&rr(3, 2, 0));
    s.step_until(10_000).unwrap();
    let on0 = if s.vcpus[0].running.is_some() { 0 } else { 2 };
    let waiting = 2 - on0;
    assert!(s.vcpus[waiting].running.is_none() && s.ready[waiting]);
    let mut t = s.now;
    assert_eq!(s.yield_to(1, on0, &mut t), 0, "target running");
    assert!(t > s.now, "an attempt costs run-queue-lock time");
    let t0 = t;
    let dl = s.tasks[s.vcpus[1].task as usize].deadline;
    assert_eq!(s.yield_to(1, waiting, &mut t), 1, "preempted target");
    assert!(t > t0);
    assert_eq!(s.rqs[0].buddy, Some(s.vcpus[waiting].task), "next buddy set on the target's queue");
    assert!(s.tasks[s.vcpus[1].task as usize].deadline > dl, "yielder penalised");

    // A halted target: one thread only, so v1 and v2 halt.
    let mut s = sim_of(&rr(3, 2, 1));
    s.step_until(10_000_000).unwrap();
    assert!(s.vcpus[1].halted && s.vcpus[2].halted && s.vcpus[0].running.is_some());
    let mut t = s.now;
    assert_eq!(s.yield_to(0, 1, &mut t), 0, "target sleeps");
}

#[test]
fn ple_window_doubles_while_spinning_and_resets_on_sched_in() {
    // Two threads on two vCPUs/CPUs contend for a lock held 2 ms: the waiter
    // pause-loop-exits with windows 4096, 8192, ... and is never scheduled out.
    let mut c = rr(2, 2, 0);
    c.vms[0].workload.phases = vec![Phase::Lock {
        lock: 0,
        lock_kind: LockKind::Ticket,
        hold_ns: 2_000_000,
        dist: Dist::Fixed,
        prob: 1.0,
        sites: 1,
        irqs_off: false,
    }];
    let mut s = sim_of(&c);
    s.step_until(1_500_000).unwrap();
    let w = if s.vcpus[0].c.ple_exits > 0 { 0 } else { 1 };
    let exits = s.vcpus[w].c.ple_exits;
    assert!(exits >= 5, "{exits}");
    assert_eq!(s.vcpus[w].ple_window, 4096u64 << exits);
    assert_eq!(s.vcpus[w].c.sched_in, 1);
    // sched-in after a switch-out resets the window (shrink = 0).
    let cpu = s.vcpus[w].running.unwrap() as usize;
    s.schedule(cpu, Why::Tick); // nothing else runnable: no switch, no reset
    assert_eq!(s.vcpus[w].ple_window, 4096u64 << exits);
    s.vcpus[w].scheduled_out = true;
    s.vcpus[w].act = super::state::Act::Off;
    s.vcpus[w].running = None;
    s.vcpu_sched_in(w, cpu);
    assert_eq!(s.vcpus[w].ple_window, 4096);
}

#[test]
fn preempted_byte_only_for_involuntary_preemption_at_an_instruction_boundary() {
    let mut s = sim_of(&rr(3, 2, 0));
    s.step_until(10_000).unwrap();
    let on0 = if s.vcpus[0].running.is_some() { 0 } else { 2 };
    // a tick-driven switch: reported
    let task = s.vcpus[on0].task as usize;
    s.tasks[task].vruntime += 10_000_000;
    s.tasks[task].deadline = s.tasks[task].vruntime;
    s.schedule(0, Why::Tick);
    assert!(s.vcpus[on0].running.is_none());
    assert!(s.vcpus[on0].preempted && s.ready[on0] && s.vcpus[on0].st_preempted);
    assert_eq!(s.vcpus[on0].c.preemption_reported, 1);
    // a switch at the end of an exit handler (yield): preempted, but the byte is not set
    let other = 2 - on0;
    let task = s.vcpus[other].task as usize;
    s.tasks[task].vruntime += 20_000_000;
    s.tasks[task].deadline = s.tasks[task].vruntime;
    s.schedule(0, Why::Yield);
    assert!(s.vcpus[other].preempted && !s.vcpus[other].st_preempted);
    assert_eq!(s.vcpus[other].c.preemption_other, 1);
    // sched-in clears preempted, ready and the byte
    assert!(!s.vcpus[on0].preempted && !s.ready[on0] && !s.vcpus[on0].st_preempted);
    // a tick that lands while the vCPU is in the host (here: polling in
    // kvm_vcpu_halt after a HLT exit) is no instruction boundary either
    s.vcpus[on0].act = super::state::Act::HaltPoll { start: s.now, end: s.now + 100_000 };
    let task = s.vcpus[on0].task as usize;
    s.tasks[task].vruntime += 40_000_000;
    s.tasks[task].deadline = s.tasks[task].vruntime;
    s.schedule(0, Why::Tick);
    assert!(s.vcpus[on0].running.is_none() && s.vcpus[on0].preempted && !s.vcpus[on0].st_preempted);
    assert_eq!(s.vcpus[on0].c.preemption_reported, 1);
    assert_eq!(s.vcpus[on0].c.preemption_other, 1);
}

#[test]
fn halted_vcpus_are_blocking_not_preempted_and_stay_blocking_after_wake() {
    let mut s = sim_of(&rr(3, 2, 1));
    s.step_until(10_000_000).unwrap();
    let h = &s.vcpus[1];
    assert!(h.halted && h.blocking && !h.preempted && !s.ready[1] && !h.st_preempted);
    s.vcpu_host_wake(1, super::state::WakeReason::Timer);
    let h = &s.vcpus[1];
    assert!(s.ready[1] && h.blocking, "blocking stays true until it runs");
    let v = s.view(1);
    assert!(!v.dy_runnable, "a timer-only wake is not dy_runnable");
    assert!(!policy::candidate_passes(&v, true, policy::Filter::UPSTREAM));
}

#[test]
fn ple_disabled_means_no_exits() {
    let mut c = small(PolicyKind::Upstream, 2, 4, 4);
    c.vms[0].ple.enabled = false;
    let r = run(&c).unwrap();
    assert_eq!(r.summary.u64s("ple_exits")[0], 0);
    assert!(r.summary.f64s("spin_frac")[0] > 0.0);
}

#[test]
fn gang_scheduling_conserves_time() {
    let mut c = small(PolicyKind::Upstream, 4, 4, 8);
    c.host.scheduler = Scheduler::Gang;
    c.trace = true;
    let r = run(&c).unwrap();
    conservation(&r, c.duration_ns);
    assert!(r.summary.u64s("ops")[0] > 0);
}

#[test]
fn every_lock_kind_and_phase_runs_and_conserves() {
    for kind in [LockKind::Tas, LockKind::Ticket, LockKind::Queued, LockKind::PvQueued, LockKind::Mutex] {
        let mut c = small(PolicyKind::Upstream, 2, 4, 3);
        c.host.background.utilization = 0.2;
        c.vms[0].threads = 6;
        c.vms[0].pv.guest_idle_poll_ns = 20_000;
        c.vms[0].workload.phases = vec![
            Phase::Compute { ns: 10_000, dist: Dist::Exp, mode: Mode::User, prob: 1.0 },
            Phase::Lock {
                lock: 0,
                lock_kind: kind,
                hold_ns: 3_000,
                dist: Dist::Uniform,
                prob: 1.0,
                sites: 1,
                irqs_off: false,
            },
            Phase::Ipi { targets: 0, handler_ns: 1_000, prob: 0.2, tlb_flush: false },
            Phase::Send { to: 1, prob: 1.0 },
            Phase::Recv { prob: 1.0 },
            Phase::Sleep { ns: 5_000, dist: Dist::Exp, prob: 0.3, periodic: false },
            Phase::Barrier { prob: 1.0 },
        ];
        c.trace = true;
        let r = run(&c).unwrap();
        conservation(&r, c.duration_ns);
        assert!(r.summary.u64s("ops")[0] > 0, "{kind:?}");
    }
}

#[test]
fn fixed_iterations_end_the_run_early() {
    let mut c = small(PolicyKind::Upstream, 1, 4, 4);
    c.vms[0].workload.iterations = 10;
    c.duration_ns = 1_000_000_000;
    let r = run(&c).unwrap();
    assert!(r.summary.get("finished") == Some(&Column::Bool(vec![true])));
    assert!(r.summary.u64s("duration_ns")[0] < c.duration_ns);
    assert_eq!(r.summary.u64s("ops")[0], 40);
    conservation(&r, c.duration_ns);
}

#[test]
fn a_workload_that_takes_no_time_is_rejected() {
    // IPIs to nobody (one vCPU) and a zero-length compute would loop forever
    // at one instant; validation rejects it (the engine also stops with
    // SimError::NoProgress if a zero-time cycle ever slipped through).
    let mut c = rr(1, 1, 0);
    c.vms[0].workload.phases = vec![
        Phase::Ipi { targets: 0, handler_ns: 1000, prob: 1.0, tlb_flush: false },
        Phase::Compute { ns: 0, dist: Dist::Fixed, mode: Mode::User, prob: 1.0 },
    ];
    assert!(c.validate().unwrap_err().contains("must take time"));
    c.vms[0].workload.phases[1] = Phase::Compute { ns: 1000, dist: Dist::Fixed, mode: Mode::User, prob: 0.5 };
    assert!(c.validate().unwrap_err().contains("must take time"));
}

/// The VM's lock-wait histogram: no wait without contention; with a ticket
/// lock on one CPU the next ticket's vCPU waits for host slices (ms), and
/// the waits (Lock phase start → running with the lock) are at least as long
/// in total as the waiters' spinning on their CPU.
#[test]
fn lock_waits_are_recorded_from_phase_start_to_running_with_the_lock() {
    let lockcfg = |vcpus: u32| SimConfig {
        duration_ns: 100_000_000,
        host: HostConfig { n_pcpus: 1, ..Default::default() },
        vms: vec![VmConfig {
            vcpus,
            policy: PolicyConfig { kind: PolicyKind::NoYield, ..Default::default() },
            ple: PleConfig { enabled: false, ..Default::default() },
            workload: WorkloadConfig {
                phases: vec![
                    Phase::Compute { ns: 31_000, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 },
                    Phase::Lock {
                        lock: 0,
                        lock_kind: LockKind::Ticket,
                        hold_ns: 33_000,
                        dist: Dist::Fixed,
                        prob: 1.0,
                        sites: 1,
                        irqs_off: false,
                    },
                ],
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    };
    let one = run(&lockcfg(1)).unwrap();
    assert_eq!(one.vms.f64s("lock_wait_mean_ns")[0], 0.0);
    assert_eq!(one.vms.f64s("lock_wait_p99_ns")[0], 0.0);
    let three = run(&lockcfg(3)).unwrap();
    let acq = three.vms.u64s("lock_acquisitions")[0] as f64;
    let mean = three.vms.f64s("lock_wait_mean_ns")[0];
    assert!(mean > 1_000_000.0, "mean wait {mean} ns");
    let spin: u64 = three.vcpus.u64s("spin_ns").iter().sum();
    // histogram means are within 1.6 % of the exact values
    assert!(mean * acq >= 0.9 * spin as f64, "waits {} ns < spinning {spin} ns", mean * acq);
    assert!(three.vms.f64s("lock_wait_p99_ns")[0] >= three.vms.f64s("lock_wait_p50_ns")[0]);
}

/// A periodic Sleep wakes on its grid: every run of the vCPU after the first
/// starts at a multiple of the period (an idle host, work shorter than it);
/// a periodic Sleep needs a fixed length.
#[test]
fn periodic_sleep_wakes_on_its_grid() {
    let mut c = rr(1, 1, 1);
    c.duration_ns = 20_000_000;
    c.trace = true;
    c.vms[0].workload.phases = vec![
        Phase::Sleep { ns: 1_000_000, dist: Dist::Fixed, prob: 1.0, periodic: true },
        Phase::Compute { ns: 250_000, dist: Dist::Exp, mode: Mode::Kernel, prob: 1.0 },
    ];
    let r = run(&c).unwrap();
    let t = r.trace.as_ref().unwrap();
    let starts = &t.u64s("start_ns")[1..];
    assert!(starts.len() >= 10);
    assert!(starts.iter().all(|s| s % 1_000_000 == 0), "{starts:?}");
    c.vms[0].workload.phases[0] = Phase::Sleep { ns: 1_000_000, dist: Dist::Exp, prob: 1.0, periodic: true };
    assert!(c.validate().unwrap_err().to_string().contains("periodic"));
}

#[test]
fn a_trace_limit_stops_the_run_and_changes_nothing_below_it() {
    let mut c = small(PolicyKind::DyEligible, 2, 4, 2);
    c.trace = true;
    let full = run(&c).unwrap();
    let rows = full.trace.as_ref().unwrap().u64s("start_ns").len() as u64;
    assert!(rows > 10);
    let same = run_limited(&c, &|_, vm| Ok(policy::builtin(&vm.policy).unwrap()), &|| false, rows).unwrap();
    assert_eq!(same.summary, full.summary);
    assert_eq!(same.trace, full.trace);
    let cut = run_limited(&c, &|_, vm| Ok(policy::builtin(&vm.policy).unwrap()), &|| false, rows / 2);
    match cut {
        Err(SimError::TraceLimit(m)) => assert!(m.contains(&format!("trace_max_rows={}", rows / 2)), "{m}"),
        other => panic!("expected TraceLimit, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_trace_window_keeps_exactly_the_slices_that_overlap_it_and_changes_nothing_else() {
    let mut c = small(PolicyKind::DyEligible, 2, 4, 2);
    c.trace = true;
    let full = run(&c).unwrap();
    let t = full.trace.as_ref().unwrap();
    let (s, e) = (t.u64s("start_ns"), t.u64s("end_ns"));
    let (from, until) = (c.duration_ns / 3, c.duration_ns / 2);
    let want: Vec<(u64, u64)> =
        s.iter().zip(e).filter(|&(&a, &b)| b > from && a < until).map(|(&a, &b)| (a, b)).collect();
    assert!(!want.is_empty() && want.len() < s.len());
    c.trace_from_ns = from;
    c.trace_until_ns = until;
    let w = run(&c).unwrap();
    let wt = w.trace.as_ref().unwrap();
    let got: Vec<(u64, u64)> = wt.u64s("start_ns").iter().zip(wt.u64s("end_ns")).map(|(&a, &b)| (a, b)).collect();
    assert_eq!(got, want);
    assert_eq!(w.summary, full.summary, "a window changes only what is recorded");
    // a limit hit inside a window says what the window would need
    let cut = run_limited(&c, &|_, vm| Ok(policy::builtin(&vm.policy).unwrap()), &|| false, 2);
    match cut {
        Err(SimError::TraceLimit(m)) => assert!(m.contains("would need about") && m.contains("MB"), "{m}"),
        other => panic!("expected TraceLimit, got {:?}", other.map(|_| ())),
    }
    c.trace_until_ns = from;
    assert!(c.validate().unwrap_err().contains("trace_until_ns"));
}

#[test]
fn every_switch_in_of_a_vcpu_thread_costs_switch_ns_of_exit_time_before_its_guest_resumes() {
    // two computing vCPUs on one CPU: every slice starts with the switch
    let mut c = rr(2, 1, 0);
    c.duration_ns = 200_000_000;
    let free = run(&c).unwrap();
    c.host.switch_ns = 50_000;
    let r = run(&c).unwrap();
    conservation(&r, c.duration_ns);
    let (sched_in, exit) = (r.vcpus.u64s("sched_in"), r.vcpus.u64s("exit_ns"));
    let free_exit = free.vcpus.u64s("exit_ns");
    for v in 0..2 {
        // a switch still under way at the end is cut there
        let owed = sched_in[v] * 50_000;
        assert!(exit[v] - free_exit[v] <= owed && exit[v] - free_exit[v] + 50_000 >= owed, "vCPU {v}");
        assert!(sched_in[v] >= 20, "4 ms ticks over 200 ms: {}", sched_in[v]);
    }
    // the switches come out of the guest's time, not out of nothing
    let useful = |r: &SimResult| r.vcpus.u64s("useful_ns").iter().sum::<u64>();
    let switches: u64 = sched_in.iter().sum();
    let lost = useful(&free) as i64 - useful(&r) as i64;
    assert!((lost - (switches * 50_000) as i64).abs() <= 2 * 50_000 + 20_000_000 / 10, "lost {lost}");
}

/// A waker thread bound to vCPU 0 handing one item at a time to a worker
/// thread (10 µs of waker work, 20 µs of worker work: the twin of vcpulab's
/// wake-placement program), two vCPUs on two CPUs, 20 ms; `tune` adjusts the
/// VM.
fn waker_worker(tune: impl FnOnce(&mut VmConfig)) -> SimConfig {
    let k = |ns| Phase::Compute { ns, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 };
    let mut vm = computing_vm(2);
    vm.threads = 2;
    vm.workload.thread0_bound = true;
    vm.workload.thread0_phases = vec![k(10_000), Phase::Send { to: 1, prob: 1.0 }, Phase::Recv { prob: 1.0 }];
    vm.workload.phases = vec![Phase::Recv { prob: 1.0 }, k(20_000), Phase::Send { to: 1, prob: 1.0 }];
    tune(&mut vm);
    SimConfig {
        host: HostConfig { n_pcpus: 2, ..Default::default() },
        vms: vec![vm],
        duration_ns: 20_000_000,
        ..Default::default()
    }
}

/// `Pv.guest_idle_poll_vcpus`: only the listed vCPUs idle-poll; a poll that
/// the next message reaches in time is a hit, one that runs out a miss and
/// halts. A waker bound to vCPU 0 hands one item at a time to a worker
/// thread (the twin of vcpulab's wake-placement program): with the worker's
/// vCPU 1 polling 50 µs and the next item 10 µs after each completion, every
/// poll on vCPU 1 is a hit, vCPU 0 never polls; with every vCPU polling,
/// vCPU 0 polls too; with a 1 µs window vCPU 1's polls run out.
#[test]
fn guest_idle_polling_runs_on_the_listed_vcpus_only_and_counts_hits_and_misses() {
    let build = |poll_ns: u64, vcpus: Vec<u32>| {
        waker_worker(|vm| {
            vm.pv.guest_idle_poll_ns = poll_ns;
            vm.pv.guest_idle_poll_vcpus = vcpus;
        })
    };
    let col = |r: &SimResult, name: &str| r.vcpus.u64s(name).to_vec();
    let only1 = run(&build(50_000, vec![1])).unwrap();
    conservation(&only1, 20_000_000);
    let (hits, misses) = (col(&only1, "guest_idle_poll_hits"), col(&only1, "guest_idle_poll_misses"));
    assert_eq!((hits[0], misses[0], col(&only1, "idle_poll_ns")[0]), (0, 0, 0), "vCPU 0 is not listed");
    assert!(hits[1] > 100 && misses[1] == 0, "vCPU 1 polls and the next item comes in time: {hits:?} {misses:?}");
    let all = run(&build(50_000, vec![])).unwrap();
    assert!(col(&all, "guest_idle_poll_hits")[0] > 100, "empty: every vCPU polls");
    let short = run(&build(1_000, vec![1])).unwrap();
    let (hits, misses) = (col(&short, "guest_idle_poll_hits"), col(&short, "guest_idle_poll_misses"));
    assert!(misses[1] > 100 && hits[1] == 0, "a 1 µs window runs out before the next item: {hits:?} {misses:?}");
    // the list names vCPUs of the VM, ascending
    for bad in [vec![2], vec![1, 1], vec![1, 0]] {
        let e = build(50_000, bad.clone()).validate().unwrap_err();
        assert!(e.contains("vms[0].pv.guest_idle_poll_vcpus"), "{bad:?}: {e}");
    }
}

/// The guest's idle poll times itself with the guest's clock (`poll_idle`,
/// drivers/cpuidle/poll_state.c), which runs on while the vCPU is switched
/// out: a window interrupted by host load goes on to its original end when
/// the vCPU runs again, or ends in the halt at once if that end has passed.
/// So no window polls longer than its length, and each ends once, as a hit
/// or a miss. One vCPU idle-polling 200 µs between sleeps of 300 µs on
/// average, sharing its CPU with a background task half of the time (CFS:
/// its wake-ups preempt the polling vCPU). Restarting the window instead
/// polled 82.5 ms in 405 windows here.
/// One vCPU running `phases`, idle-polling 200 µs windows bounded by
/// `limit`, alone on one CFS CPU with a background task half of the time
/// (100 µs bursts whose wake-ups preempt it), for 200 ms.
fn idle_poll_beside_load(phases: Vec<Phase>, limit: IdlePollLimit) -> SimConfig {
    let mut vm = computing_vm(1);
    vm.workload.phases = phases;
    vm.pv.guest_idle_poll_ns = 200_000;
    vm.pv.guest_idle_poll_limit = limit;
    let mut c = SimConfig {
        host: HostConfig { n_pcpus: 1, scheduler: Scheduler::Cfs, ..Default::default() },
        vms: vec![vm],
        duration_ns: 200_000_000,
        ..Default::default()
    };
    c.host.background.utilization = 0.5;
    c.host.background.burst_ns = 100_000;
    c
}

#[test]
fn an_interrupted_guest_idle_poll_runs_on_to_its_original_end() {
    let phases = vec![
        Phase::Sleep { ns: 300_000, dist: Dist::Exp, prob: 1.0, periodic: false },
        Phase::Compute { ns: 10_000, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 },
    ];
    let c = idle_poll_beside_load(phases, IdlePollLimit::Clock);
    let r = run(&c).unwrap();
    conservation(&r, c.duration_ns);
    let v = |n: &str| r.vcpus.u64s(n)[0];
    let (hits, misses, polled) = (v("guest_idle_poll_hits"), v("guest_idle_poll_misses"), v("idle_poll_ns"));
    assert!(hits > 50 && misses > 50, "both outcomes occur: {hits} hits, {misses} misses");
    assert!(v("preemption_reported") > 50, "host load interrupts the vCPU");
    assert!(polled <= (hits + misses) * 200_000, "{polled} ns polled in {} windows of 200 µs", hits + misses);
}

/// `Pv.guest_idle_poll_limit = "checks"` (vcpulab's mailbox poll counts its
/// checks down): an interrupted window goes on for the polling time it had
/// left, so every window that runs out polled its whole length on the vCPU.
/// Under `"clock"` the time away counts, and interrupted windows poll less.
/// One vCPU idle-polling 200 µs after each ~1 ms of work (exponential), its
/// thread then asleep for 1 ms (no poll can catch it: every window runs
/// out), sharing its CPU with a background task half of the time (CFS: 74
/// windows, 519-555 preemptions; "clock" polled 11.6 ms, "checks" 14.8 ms).
#[test]
fn a_guest_idle_poll_limited_by_checks_polls_its_whole_window_on_the_vcpu() {
    let polled_and_misses = |limit: IdlePollLimit| {
        let phases = vec![
            Phase::Sleep { ns: 1_000_000, dist: Dist::Fixed, prob: 1.0, periodic: false },
            Phase::Compute { ns: 1_000_000, dist: Dist::Exp, mode: Mode::Kernel, prob: 1.0 },
        ];
        let c = idle_poll_beside_load(phases, limit);
        let r = run(&c).unwrap();
        conservation(&r, c.duration_ns);
        let v = |n: &str| r.vcpus.u64s(n)[0];
        assert!(v("preemption_reported") > 50, "host load interrupts the vCPU");
        assert_eq!(v("guest_idle_poll_hits"), 0, "a 1-ms sleep outlasts every window");
        (v("idle_poll_ns"), v("guest_idle_poll_misses"))
    };
    let (polled, misses) = polled_and_misses(IdlePollLimit::Checks);
    assert!(misses > 50, "{misses} windows");
    // the run's end may cut one window short
    assert!(polled > (misses - 1) * 200_000 && polled <= (misses + 1) * 200_000, "{polled} ns in {misses} windows");
    let (polled, misses) = polled_and_misses(IdlePollLimit::Clock);
    assert!(polled < (misses - 1) * 200_000, "the clock's windows lose the time away: {polled} ns in {misses} windows");
}

/// `Pv.halt_wake_ns`: a vCPU back from a halt that blocked spends it as exit
/// time on its CPU before its guest resumes, so a ping-pong between two
/// vCPUs on their own CPUs (a waker bound to vCPU 0 handing one item at a
/// time to a worker on vCPU 1: [`waker_worker`], every halt blocking) pays it twice a round;
/// with `Pv.halt_wake_jitter` each return is a log-normal draw around it; a
/// halt that polling caught pays nothing.
#[test]
fn a_vcpu_back_from_a_blocked_halt_spends_halt_wake_ns_before_its_guest_resumes() {
    use crate::sim::halt_poll::{HaltPollConfig, Policy};
    let build = |wake_ns: u64, poll: bool| {
        waker_worker(|vm| {
            vm.pv.halt_wake_ns = wake_ns;
            vm.halt_poll = HaltPollConfig::new(if poll { Policy::Fixed } else { Policy::Off });
        })
    };
    let col = |r: &SimResult, name: &str| r.vcpus.u64s(name).to_vec();
    let free = run(&build(0, false)).unwrap();
    let paid = run(&build(40_000, false)).unwrap();
    conservation(&paid, 20_000_000);
    let (halts, polled) = (col(&paid, "halt_exits"), col(&paid, "halt_successful_poll"));
    let (exit, free_exit, free_halts) = (col(&paid, "exit_ns"), col(&free, "exit_ns"), col(&free, "halt_exits"));
    for v in 0..2 {
        assert!(halts[v] > 50 && polled[v] == 0, "vCPU {v}: every halt blocks ({})", halts[v]);
        // per halt, 40 µs more exit time (one return still under way at the end is cut there)
        let per = |e: u64, h: u64| e as f64 / h as f64;
        let extra = per(exit[v], halts[v]) - per(free_exit[v], free_halts[v]);
        assert!((extra - 40_000.0).abs() <= 40_000.0 / halts[v] as f64 + 1.0, "vCPU {v}: {extra} ns a halt");
    }
    // on the wake-up's path: each round has two blocked wake-ups more to wait for
    // (the waker's and the worker's iterations each count once a round)
    let rounds = |r: &SimResult| r.vms.u64s("ops")[0] as f64 / 2.0;
    let (t_free, t_paid) = (20e6 / rounds(&free), 20e6 / rounds(&paid));
    assert!((t_paid - t_free - 2.0 * 40_000.0).abs() < 0.1 * t_paid, "round {t_free} -> {t_paid} ns");
    // Pv.halt_wake_jitter: log-normal around the median, so the mean is exp(j²/2) x it (1.133 at 0.5)
    let spread = run(&waker_worker(|vm| {
        vm.pv.halt_wake_ns = 40_000;
        vm.pv.halt_wake_jitter = 0.5;
        vm.halt_poll = HaltPollConfig::new(Policy::Off);
    }))
    .unwrap();
    conservation(&spread, 20_000_000);
    let (sh, se) = (col(&spread, "halt_exits"), col(&spread, "exit_ns"));
    let per: f64 =
        (0..2).map(|v| se[v] as f64 / sh[v] as f64 - free_exit[v] as f64 / free_halts[v] as f64).sum::<f64>() / 2.0;
    assert!((per / 40_000.0 - (0.125f64).exp()).abs() < 0.06, "mean {per} ns a blocked halt");
    // polling catches every halt (a 200 µs window, the next message within 30 µs): nothing charged
    let caught = run(&build(40_000, true)).unwrap();
    let caught_free = run(&build(0, true)).unwrap();
    let (h, p) = (col(&caught, "halt_exits"), col(&caught, "halt_successful_poll"));
    let (e, e_free) = (col(&caught, "exit_ns"), col(&caught_free, "exit_ns"));
    for v in 0..2 {
        // at most the run's last halt is not caught (the run ends while it polls)
        assert!(h[v] > 50 && h[v] - p[v] <= 1, "vCPU {v}: {} of {} caught", p[v], h[v]);
        assert!(
            e[v].saturating_sub(e_free[v]) <= (h[v] - p[v]) * 40_000,
            "a polled halt pays nothing: {} vs {}",
            e[v],
            e_free[v]
        );
    }
}
