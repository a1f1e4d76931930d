//! The scheduler's rules on hand-built plans: grants, slices, co-stops,
//! balance homes, directed yield through the simulator's policies.

use super::*;
use crate::sim::config::{PolicyConfig, PolicyKind};

const SLICE: u64 = 4_000_000;

fn cfg(policy: Policy) -> Config {
    Config {
        policy,
        slice_ns: SLICE,
        spin: SpinWindow { window: 64, grow: 2, shrink: 0, max: u32::MAX as u64 },
        watchdog_ns: 20_000_000,
        policy_deadline_ns: 10_000_000,
        max_decisions: 100_000,
        seed: 0,
    }
}

/// `vms` VMs of `per` vCPUs, each with a steal area and a spin window in its own page.
fn members(vms: usize, per: usize) -> (Arc<GuestMemory>, Vec<Member>) {
    let mem = Arc::new(GuestMemory::new(64 * 4096).unwrap());
    let mut out = Vec::new();
    for vm in 0..vms {
        for idx in 0..per {
            let g = (vm * per + idx) as u64;
            out.push(Member {
                vm,
                idx,
                mem: mem.clone(),
                steal_gpa: Some(g * 4096),
                window_gpa: Some(g * 4096 + 1024),
                home: None,
            });
        }
    }
    (mem, out)
}

fn sched(policy: Policy, vms: usize, per: usize, cpus: usize) -> (Arc<GuestMemory>, Scheduler) {
    let (mem, m) = members(vms, per);
    let pol = if policy == Policy::DirectedYield {
        (0..vms).map(|_| policy_box(PolicyKind::Oracle)).collect()
    } else {
        Vec::new()
    };
    (mem, Scheduler::new(cfg(policy), (0..cpus).collect(), m, pol).unwrap())
}

fn policy_box(kind: PolicyKind) -> Option<Box<dyn DirectedYieldPolicy>> {
    crate::sim::policy::builtin(&PolicyConfig { kind, ..Default::default() })
}

fn running(s: &Scheduler) -> Vec<Option<usize>> {
    s.lock().holder.clone()
}

/// Ends the earliest slice, `n` times; returns the instant reached.
fn drive(s: &Scheduler, t0: Instant, n: usize) -> Instant {
    let mut now = t0;
    for _ in 0..n {
        let (c, g, end) = {
            let st = s.lock();
            (0..st.holder.len())
                .filter_map(|c| st.holder[c].map(|g| (c, g, st.slice_end[c])))
                .min_by_key(|x| x.2)
                .expect("someone holds a token")
        };
        now = now.max(end);
        let _ = c;
        s.slice_end(g, Some(now));
    }
    now
}

fn start_all(s: &Scheduler, n: usize, t0: Instant) {
    s.set_origin(t0);
    for g in 0..n {
        s.start(g, 0, Some(t0));
    }
}

#[test]
fn round_robin_shares_the_cpus_fairly_and_marks_the_waiting_preempted() {
    let (mem, s) = sched(Policy::RoundRobin, 2, 2, 2);
    let t0 = Instant::now();
    start_all(&s, 4, t0);
    assert_eq!(running(&s).iter().filter(|h| h.is_some()).count(), 2);
    drive(&s, t0, 400);
    let st = s.lock();
    let runs: Vec<u64> = st.v.iter().map(|v| v.run_ns).collect();
    let (lo, hi) = (runs.iter().min().unwrap(), runs.iter().max().unwrap());
    assert!(hi - lo <= SLICE, "{runs:?}");
    // the two waiting vCPUs have their preempted byte set, the holders not
    for (g, v) in st.v.iter().enumerate() {
        let byte = mem.read_u8(g as u64 * 4096 + 16).unwrap();
        assert_eq!(byte == 1, v.status == Status::Ready, "vCPU {g}: {:?}", v.status);
    }
    assert!(st.decisions.iter().all(|d| d.why == Why::Slice || d.why == Why::Start));
}

#[test]
fn no_token_before_every_thread_arrives_then_vcpu_order_under_every_policy() {
    for policy in [Policy::RoundRobin, Policy::Balance, Policy::RelaxedCo { skew_ns: SLICE }, Policy::Gang] {
        let (_, s) = sched(policy, 2, 2, 2);
        let t0 = Instant::now();
        s.set_origin(t0);
        // the threads arrive in reverse order: nobody runs until the last
        for g in [3, 2, 1] {
            s.start(g, 0, Some(t0));
            assert_eq!(running(&s), vec![None, None], "{policy:?} after vCPU {g}");
        }
        s.start(0, 0, Some(t0));
        let h = running(&s);
        // VM 0's two vCPUs first (under balance each is at home there)
        assert_eq!(h, vec![Some(0), Some(1)], "{policy:?}");
        let st = s.lock();
        assert!(st.decisions.iter().all(|d| d.why == Why::Start || d.why == Why::Gang), "{policy:?}");
        // the rest wait in vCPU order (balance: VM 1's vCPU 1 at home on CPU 0, vCPU 0 on CPU 1)
        let waiting: Vec<usize> = st.queues.iter().flatten().copied().collect();
        assert_eq!(waiting, if policy == Policy::Balance { vec![3, 2] } else { vec![2, 3] }, "{policy:?}");
    }
}

#[test]
fn gang_runs_all_or_none_of_a_vm_and_vms_take_turns() {
    let (_, s) = sched(Policy::Gang, 3, 2, 2);
    let t0 = Instant::now();
    start_all(&s, 6, t0);
    let mut turns = Vec::new();
    for _ in 0..60 {
        let h = running(&s);
        let vms: std::collections::BTreeSet<usize> = h.iter().flatten().map(|&g| g / 2).collect();
        assert_eq!(vms.len(), 1, "one VM at a time: {h:?}");
        assert!(h.iter().all(|x| x.is_some()), "the whole VM: {h:?}");
        turns.push(*vms.iter().next().unwrap());
        drive(&s, t0, 2);
    }
    assert_eq!(&turns[..6], &[0, 1, 2, 0, 1, 2]);
}

#[test]
fn gang_refuses_a_vm_wider_than_the_cpus() {
    let (_, m) = members(1, 3);
    let e = Scheduler::new(cfg(Policy::Gang), vec![0, 1], m, Vec::new()).err().unwrap();
    assert!(e.to_string().contains("more than the 2 host CPUs"), "{e}");
}

#[test]
fn balance_keeps_every_vcpu_on_its_home_cpu_and_siblings_apart() {
    let (_, s) = sched(Policy::Balance, 2, 2, 2);
    let t0 = Instant::now();
    start_all(&s, 4, t0);
    drive(&s, t0, 200);
    let st = s.lock();
    for d in &st.decisions {
        if d.into >= 0 {
            assert_eq!(st.v[d.into as usize].home, d.cpu as usize, "{d:?}");
        }
    }
    assert_ne!(st.v[0].home, st.v[1].home);
    assert_ne!(st.v[2].home, st.v[3].home);
    let runs: Vec<u64> = st.v.iter().map(|v| v.run_ns).collect();
    assert!(runs.iter().all(|&r| r >= 45 * SLICE), "{runs:?}");
}

#[test]
fn pinned_keeps_vcpu_thread_g_on_cpu_g_mod_n_and_shares_each_cpu_fairly() {
    // 1 VM x 3 vCPUs on 2 CPUs: homes 0, 1, 0 (siblings may share a CPU, unlike balance)
    let (_, s) = sched(Policy::Pinned, 1, 3, 2);
    let t0 = Instant::now();
    start_all(&s, 3, t0);
    drive(&s, t0, 200);
    let st = s.lock();
    assert_eq!(st.v.iter().map(|v| v.home).collect::<Vec<_>>(), vec![0, 1, 0]);
    for d in &st.decisions {
        if d.into >= 0 {
            assert_eq!(st.v[d.into as usize].home, d.cpu as usize, "{d:?}");
        }
    }
    // CPU 1 is vCPU 1's alone (its slices renew); CPU 0's two vCPUs take turns (about half the 200 slice ends)
    assert_eq!(st.holder[1], Some(1));
    let runs: Vec<u64> = st.v.iter().map(|v| v.run_ns).collect();
    assert!(runs[0] >= 45 * SLICE && runs[0].abs_diff(runs[2]) <= SLICE, "{runs:?}");
}

#[test]
fn relaxed_co_stops_a_vcpu_ahead_of_its_sibling_and_never_stalls() {
    // 2 VMs x 2 vCPUs on 2 CPUs: whatever the order, every vCPU keeps running
    // and no sibling gets more than the skew plus a slice ahead
    let skew = 3_000_000;
    let (_, s) = sched(Policy::RelaxedCo { skew_ns: skew }, 2, 2, 2);
    let t0 = Instant::now();
    start_all(&s, 4, t0);
    drive(&s, t0, 400);
    let st = s.lock();
    let runs: Vec<u64> = st.v.iter().map(|v| v.run_ns).collect();
    // 400 slice ends on 2 CPUs: 100 slices each when fair
    assert!(runs.iter().all(|&r| r >= 90 * SLICE), "every vCPU ran: {runs:?}");
    for vm in 0..2 {
        let (a, b) = (runs[2 * vm], runs[2 * vm + 1]);
        assert!(a.abs_diff(b) <= skew + SLICE, "VM {vm}: {a} vs {b}");
    }
}

#[test]
fn relaxed_co_keeps_three_siblings_on_two_cpus_within_the_skew_and_a_slice() {
    let skew = 1_000_000;
    let (_, s) = sched(Policy::RelaxedCo { skew_ns: skew }, 1, 3, 2);
    let t0 = Instant::now();
    start_all(&s, 3, t0);
    let mut worst = 0;
    for _ in 0..200 {
        let now = drive(&s, t0, 1);
        let st = s.lock();
        let r: Vec<u64> = (0..3).map(|g| Scheduler::run_time(&st, g, now)).collect();
        worst = worst.max(r.iter().max().unwrap() - r.iter().min().unwrap());
    }
    assert!(worst <= skew + SLICE, "the largest lead was {worst} ns");
    assert!(s.lock().decisions.iter().any(|d| d.why == Why::CoStop));
}

#[test]
fn relaxed_co_co_stops_when_a_sibling_lags() {
    // VM 0 of 2 vCPUs and VM 1 of 1 on 2 CPUs: VM 1's vCPU takes turns with
    // VM 0's, so one of VM 0's runs ahead of its sibling and is co-stopped
    let (_, mut m) = members(2, 2);
    m.truncate(3);
    let s = Scheduler::new(cfg(Policy::RelaxedCo { skew_ns: 1_000_000 }), vec![0, 1], m, Vec::new()).unwrap();
    let t0 = Instant::now();
    start_all(&s, 3, t0);
    drive(&s, t0, 100);
    let st = s.lock();
    let whys: Vec<Why> = st.decisions.iter().map(|d| d.why).take(12).collect();
    let runs: Vec<u64> = st.v.iter().map(|v| v.run_ns).collect();
    assert!(st.decisions.iter().any(|d| d.why == Why::CoStop), "{whys:?} {runs:?}");
    assert!(st.v[0].run_ns.abs_diff(st.v[1].run_ns) <= 1_000_000 + SLICE, "{runs:?}");
}

#[test]
fn a_directed_yield_hands_the_spinners_token_to_the_candidate() {
    // the oracle yields to the holder the guest named when it is not running
    let (mem, s) = sched(Policy::DirectedYield, 1, 3, 1);
    let t0 = Instant::now();
    start_all(&s, 3, t0);
    let me = running(&s)[0].unwrap();
    let holder = (me + 1) % 3;
    let t1 = t0 + Duration::from_micros(100);
    assert_eq!(s.spin_exit(me, holder as u32, t1, Some(t1)).unwrap(), SpinOutcome::Yielded);
    assert_eq!(running(&s)[0], Some(holder));
    let d = *s.lock().decisions.last().unwrap();
    assert_eq!((d.why, d.out, d.into), (Why::Yield, me as i32, holder as i32));
    // the spinner waits, preempted; the window grew and is in guest RAM
    assert_eq!(mem.read_u8(me as u64 * 4096 + 16).unwrap(), 1);
    assert_eq!(mem.read_u64(me as u64 * 4096 + 1024).unwrap(), 128);
    s.entering(holder, Some(t1 + Duration::from_micros(30)));
    let spin = s.lock().spins[0];
    assert_eq!((spin.holder, spin.yielded_to, spin.latency_ns), (holder as i32, holder as i32, 30_000));
    // a holder that runs: the oracle keeps the spinner spinning
    assert_eq!(s.spin_exit(holder, holder as u32, t1, Some(t1)).unwrap(), SpinOutcome::Keep);
}

#[test]
fn yield_to_a_running_vcpu_with_nobody_waiting_is_esrch() {
    let (_, m) = members(1, 2);
    let policies = vec![policy_box(PolicyKind::Upstream)];
    let s = Scheduler::new(cfg(Policy::DirectedYield), vec![0, 1], m, policies).unwrap();
    let t0 = Instant::now();
    start_all(&s, 2, t0);
    assert_eq!(s.spin_exit(0, 1, t0, Some(t0)).unwrap(), SpinOutcome::Keep);
    let spin = s.lock().spins[0];
    assert_eq!(spin.yielded_to, -1);
}

#[test]
fn a_halt_gives_the_cpu_away_and_the_wake_up_asks_for_it_again() {
    let (mem, s) = sched(Policy::RoundRobin, 1, 2, 1);
    let t0 = Instant::now();
    start_all(&s, 2, t0);
    let a = running(&s)[0].unwrap();
    let b = 1 - a;
    s.halt(a, Some(t0));
    assert_eq!(running(&s)[0], Some(b));
    // a halted vCPU is not preempted (it does not want to run)
    assert_eq!(mem.read_u8(a as u64 * 4096 + 16).unwrap(), 0);
    s.wake(a, Some(t0));
    assert_eq!(s.lock().v[a].status, Status::Ready);
    s.slice_end(b, Some(t0 + Duration::from_nanos(SLICE)));
    assert_eq!(running(&s)[0], Some(a));
}

#[test]
fn is_idle_follows_the_cpu_a_vcpu_last_ran_on() {
    let (mem, s) = sched(Policy::RoundRobin, 1, 2, 2);
    let t0 = Instant::now();
    start_all(&s, 2, t0);
    // both run: their CPUs are busy
    assert_eq!(mem.read_u8(17).unwrap(), 0);
    s.finish(1, Some(t0));
    // vCPU 1 left CPU 1 idle; vCPU 0's CPU 0 is busy
    assert_eq!(mem.read_u8(4096 + 17).unwrap(), 1);
    assert_eq!(mem.read_u8(17).unwrap(), 0);
}

#[test]
fn each_grant_is_logged_with_the_decision_that_made_it() {
    // 3 vCPUs on 2 CPUs: vCPUs 0 and 1 start, 2 waits
    let (_, s) = sched(Policy::RoundRobin, 1, 3, 2);
    let t0 = Instant::now();
    start_all(&s, 3, t0);
    let t1 = t0 + Duration::from_millis(1);
    s.halt(1, Some(t1)); // CPU 1's token to the waiting vCPU 2: a halt
    s.halt(2, Some(t1)); // CPU 1 falls idle
    s.wake(1, Some(t1)); // vCPU 1 woke: CPU 1's idle token, a wake-up
    s.finish(0, Some(t1)); // CPU 0 falls idle: a done
    let st = s.lock();
    let rows: Vec<(u32, i32, i32, &str)> = st.decisions.iter().map(|d| (d.cpu, d.out, d.into, d.why.name())).collect();
    assert_eq!(
        rows,
        vec![
            (0, -1, 0, "start"),
            (1, -1, 1, "start"),
            (1, 1, 2, "halt"),
            (1, 2, -1, "halt"),
            (1, -1, 1, "wake"),
            (0, 0, -1, "done"),
        ]
    );
}

#[test]
fn the_watchdog_names_a_holder_past_its_slice_and_margin_once() {
    let (_, s) = sched(Policy::RoundRobin, 1, 2, 1);
    let t0 = Instant::now();
    start_all(&s, 2, t0);
    let g = running(&s)[0].unwrap();
    assert!(s.watchdog(t0 + Duration::from_millis(10)).is_empty());
    let late = t0 + Duration::from_millis(30);
    assert_eq!(s.watchdog(late), vec![g]);
    assert!(s.watchdog(late + Duration::from_millis(1)).is_empty());
    assert_eq!(s.take_log().watchdog_kicks, 1);
}

#[test]
fn a_failing_policy_stops_the_run_with_an_error_naming_the_call() {
    struct Fails;
    impl DirectedYieldPolicy for Fails {
        fn on_spin(&mut self, _ctx: &mut dyn SpinCtx) -> std::result::Result<(), String> {
            Err("boom".into())
        }
    }
    let (_, m) = members(1, 2);
    let s = Scheduler::new(cfg(Policy::DirectedYield), vec![0], m, vec![Some(Box::new(Fails))]).unwrap();
    let t0 = Instant::now();
    start_all(&s, 2, t0);
    let me = running(&s)[0].unwrap();
    let e = s.spin_exit(me, 0, t0, Some(t0)).unwrap_err();
    assert!(e.to_string().contains("VM 0") && e.to_string().contains("boom"), "{e}");
    assert!(s.stopped());
    assert!(s.acquire(1 - me, t0 + Duration::from_secs(5)).is_none(), "a waiting thread returns at once");
    assert!(s.take_error().is_some());
}

#[test]
fn a_woken_vcpu_takes_the_idle_cpu_its_thread_is_on_not_the_lowest() {
    // 2 vCPUs on 2 CPUs: vCPU 1 holds CPU 1; both halt, and 1 wakes first
    let (_, s) = sched(Policy::RoundRobin, 1, 2, 2);
    let t0 = Instant::now();
    start_all(&s, 2, t0);
    let on_1 = running(&s)[1].expect("both run");
    let other = 1 - on_1;
    s.halt(on_1, Some(t0));
    s.halt(other, Some(t0));
    assert_eq!(running(&s), vec![None, None]);
    s.wake(on_1, Some(t0));
    // CPU 0 is idle too, but its thread is pinned to CPU 1: no migration
    assert_eq!(running(&s), vec![None, Some(on_1)]);
    s.wake(other, Some(t0));
    assert_eq!(running(&s), vec![Some(other), Some(on_1)]);
    // where its own CPU is taken, the lowest idle one
    s.halt(on_1, Some(t0));
    s.halt(other, Some(t0));
    s.wake(other, Some(t0));
    s.wake(on_1, Some(t0));
    assert_eq!(running(&s), vec![Some(other), Some(on_1)], "each back on its own CPU");
    let (_, s) = sched(Policy::RoundRobin, 1, 3, 2);
    start_all(&s, 3, t0);
    let st = s.lock();
    let (a, b) = (st.holder[0].unwrap(), st.holder[1].unwrap());
    drop(st);
    let c = 3 - a - b; // queued, never ran: no CPU of its own
    s.halt(b, Some(t0)); // CPU 1 goes to c
    assert_eq!(running(&s), vec![Some(a), Some(c)]);
    s.halt(a, Some(t0)); // CPU 0 idle
    s.wake(b, Some(t0)); // its CPU 1 is c's: CPU 0
    assert_eq!(running(&s), vec![Some(b), Some(c)]);
}
