//! The guest kernel's lock rules on hand-built states and short live runs
//! (kernel lock model: kernel/locking/qspinlock_paravirt.h, osq_lock.c;
//! the `virt_spin_lock` fallback; the KICK_CPU yield switch).

use super::super::config::*;
use super::super::engine::Sim;
use super::super::state::{Act, ExecWhat, Step, TState};
use super::*;
use crate::sim::test_util::sim_of;

/// One VM of `v` vCPUs pinned round-robin on `p` CPUs, one thread per vCPU,
/// looping on one lock of `kind` held `hold_ns`; no PLE, no yields, the
/// kernel lock model, a short SPIN_THRESHOLD (1000 iterations × 40 cycles at
/// 2.1 GHz = 19 µs) so that the tests stay short.
fn locks(v: u32, p: u32, kind: LockKind, hold_ns: u64) -> SimConfig {
    SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig { n_pcpus: p, affinity: Affinity::RoundRobin, ..Default::default() },
        vms: vec![VmConfig {
            vcpus: v,
            ple: PleConfig { enabled: false, ..Default::default() },
            policy: PolicyConfig { kind: PolicyKind::NoYield, ..Default::default() },
            guest: GuestConfig { lock_model: LockModel::Kernel, ..Default::default() },
            workload: WorkloadConfig {
                phases: vec![Phase::Lock {
                    lock: 0,
                    lock_kind: kind,
                    hold_ns,
                    dist: Dist::Fixed,
                    prob: 1.0,
                    sites: 1,
                    irqs_off: false,
                }],
                spin_threshold: 1000,
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The lock's holder thread and its first waiter.
fn holder_and_head(s: &Sim) -> (usize, usize) {
    let l = &s.vms[0].locks[0];
    (l.holder.unwrap() as usize, *l.waiters.front().unwrap() as usize)
}

#[test]
fn a_head_halts_after_spin_threshold_and_the_unlock_kicks_it() {
    // Two vCPUs on two CPUs, the lock held 2 ms: the waiter spins
    // SPIN_THRESHOLD (19 µs) in pv_wait_head_or_lock, hashes the lock
    // (_Q_SLOW_VAL) and halts; the unlock kicks it and it takes the lock.
    for kick_yield in [true, false] {
        let mut c = locks(2, 2, LockKind::PvQueued, 2_000_000);
        c.vms[0].pv.kick_yield = kick_yield;
        let mut s = sim_of(&c);
        s.step_until(1_000_000).unwrap();
        let (h, w) = holder_and_head(&s);
        let (hv, wv) = (s.threads[h].vcpu as usize, s.threads[w].vcpu as usize);
        assert!(s.threads[w].pv_halted && s.threads[w].pv_hashed, "the head halted");
        assert!(s.vcpus[wv].halted && s.vcpus[wv].running.is_none(), "its vCPU blocks in the host");
        assert!(s.vms[0].locks[0].slow, "_Q_SLOW_VAL");
        assert_eq!((s.vcpus[wv].c.pv_wait_head, s.vcpus[wv].c.pv_wait_node), (1, 0));
        let spun = s.vcpus[wv].acct.acc[super::super::state::C_SPIN];
        assert!((19_000..=21_000).contains(&spun), "spun {spun} ns, the threshold is 19.5 µs");
        assert_eq!(s.vcpus[hv].c.kicks, 0);
        // the holder releases at 2 ms: one KICK_CPU, the waiter holds the lock
        // (and the old holder, back for more, is the halted head in its turn)
        s.step_until(2_100_000).unwrap();
        assert_eq!(s.vcpus[hv].c.kicks, 1);
        assert_eq!(s.vms[0].locks[0].holder, Some(w as u32));
        assert!(!s.threads[w].pv_halted && s.threads[h].pv_halted);
        assert_eq!(s.vcpus[hv].c.pv_wait_head, 1);
        // the kick hypercall directed-yields only with kick_yield (nothing to
        // yield to here: the target's CPU is idle, both queues hold one task)
        assert_eq!(s.vcpus[hv].c.directed_yield_attempted, u64::from(kick_yield));
    }
}

#[test]
fn a_queue_node_waits_early_behind_a_halted_node_and_for_a_preempted_one_only_in_2019() {
    // Three vCPUs on three CPUs, lock held long: thread order holder, head, node.
    let mut s = sim_of(&locks(3, 3, LockKind::PvQueued, 50_000_000));
    s.step_until(5_000).unwrap();
    let l = &s.vms[0].locks[0];
    let (head, node) = (l.waiters[0] as usize, l.waiters[1] as usize);
    let nv = s.threads[node].vcpu as usize;
    assert!(matches!(s.vcpus[nv].act, Act::Spin { .. }), "the node spins");
    // the node starts its loop 5 µs after the head: its own threshold ends later
    // (nothing happens between the last event and 5 µs)
    s.now = 5_000;
    s.pause_act(nv);
    s.threads[node].spun = 0;
    s.vcpu_step(nv);
    // the head halts (spent its threshold): the node re-checks at once and halts early
    s.step_until(1_000_000).unwrap();
    assert!(s.threads[head].pv_halted && s.threads[node].pv_halted);
    assert_eq!(s.vcpus[nv].c.pv_wait_node, 1);
    assert_eq!(s.vcpus[nv].c.pv_wait_early, 1, "it did not spin its own threshold");

    // vcpu_is_preempted(prev->cpu): only with 75437bb304b2's rule
    for (rule, early) in
        [(WaitEarly::Never, false), (WaitEarly::PrevHalted, false), (WaitEarly::PrevHaltedOrPreempted, true)]
    {
        let mut c = locks(3, 3, LockKind::PvQueued, 50_000_000);
        c.vms[0].guest.pv_wait_early = rule;
        let mut s = sim_of(&c);
        s.step_until(5_000).unwrap();
        let l = &s.vms[0].locks[0];
        let (head, node) = (l.waiters[0] as usize, l.waiters[1] as usize);
        let (hv, nv) = (s.threads[head].vcpu as usize, s.threads[node].vcpu as usize);
        // the head's vCPU is marked preempted (steal-time byte), the node re-checks
        s.vcpus[hv].st_preempted = true;
        s.pause_act(nv);
        s.vcpu_step(nv);
        assert_eq!(s.threads[node].pv_halted, early, "{rule:?}");
        assert_eq!(s.vcpus[nv].c.pv_wait_early, u64::from(early));
    }
}

#[test]
fn a_newcomer_steals_only_while_the_head_is_not_spinning() {
    // Hand-built: the lock is free, one thread queued as the head.
    let mut s = sim_of(&locks(3, 3, LockKind::PvQueued, 50_000_000));
    s.step_until(5_000).unwrap();
    let (h, w) = holder_and_head(&s);
    let newcomer = (0..3).find(|&t| t != h && t != w).unwrap();
    let nv = s.threads[newcomer].vcpu as usize;
    let l = &mut s.vms[0].locks[0];
    l.holder = None;
    l.waiters.retain(|&x| x as usize == w);
    // the head spins in pv_wait_head_or_lock (pending bit set): no stealing
    assert!(!s.threads[w].pv_halted && s.vms[0].locks[0].pending);
    assert!(!s.pv_steal(nv, 0, 0, newcomer));
    // the head halted (pending cleared before pv_wait): one steal attempt succeeds
    s.threads[w].pv_halted = true;
    s.vms[0].locks[0].pending = false;
    assert!(s.pv_steal(nv, 0, 0, newcomer));
    assert_eq!(s.vms[0].locks[0].holder, Some(newcomer as u32));
    assert_eq!(s.vcpus[nv].c.lock_steals, 1);
    // the simple lock model has no stealing
    let mut c = locks(3, 3, LockKind::PvQueued, 50_000_000);
    c.vms[0].guest.lock_model = LockModel::Simple;
    let mut s = sim_of(&c);
    s.step_until(5_000).unwrap();
    s.vms[0].locks[0].holder = None;
    let w = *s.vms[0].locks[0].waiters.front().unwrap() as usize;
    s.threads[w].pv_halted = true;
    assert!(!s.pv_steal(0, 0, 0, 2));
}

#[test]
fn without_pv_unhalt_the_pv_lock_is_virt_spin_locks_test_and_set_and_newcomers_steal() {
    let mut vm = VmConfig::default();
    assert_eq!(effective_lock_kind(LockKind::PvQueued, &vm), LockKind::PvQueued);
    vm.pv.pv_spinlocks = false;
    assert_eq!(effective_lock_kind(LockKind::PvQueued, &vm), LockKind::Tas);
    assert_eq!(effective_lock_kind(LockKind::Ticket, &vm), LockKind::Ticket, "only the PV lock falls back");

    // Hand-built: a waiter queued first sits on a preempted vCPU; at the
    // release nobody runs on the lock, and a newcomer takes it (steal).
    let mut c = locks(3, 3, LockKind::PvQueued, 50_000_000);
    c.vms[0].pv.pv_spinlocks = false;
    let mut s = sim_of(&c);
    assert_eq!(s.vms[0].locks[0].kind, LockKind::Tas);
    s.step_until(5_000).unwrap();
    let h = s.vms[0].locks[0].holder.unwrap() as usize;
    let waiters: Vec<usize> = s.vms[0].locks[0].waiters.iter().map(|&w| w as usize).collect();
    assert_eq!(waiters.len(), 2);
    let (first, newcomer) = (waiters[0], waiters[1]);
    s.vms[0].locks[0].waiters.retain(|&w| w as usize == first);
    s.vms[0].locks[0].holder = None;
    let _ = h;
    assert!(s.lock_try(0, 0, newcomer), "test-and-set: whoever tries first on a free lock gets it");
    assert_eq!(s.vms[0].locks[0].holder, Some(newcomer as u32));
    assert_eq!(s.vms[0].locks[0].waiters.front(), Some(&(first as u32)), "the earlier waiter still waits");
}

/// A mutex held 5 ms by one thread, two more threads contending, four vCPUs
/// on four CPUs: both waiters spin optimistically (the owner runs).
fn mutex_state(vcpu_is_preempted: bool) -> (Sim, usize, usize, usize) {
    let mut c = locks(3, 3, LockKind::Mutex, 5_000_000);
    c.vms[0].guest.vcpu_is_preempted = vcpu_is_preempted;
    let mut s = sim_of(&c);
    s.step_until(5_000).unwrap();
    let l = &s.vms[0].locks[0];
    let (h, a, b) = (l.holder.unwrap() as usize, l.waiters[0] as usize, l.waiters[1] as usize);
    for t in [a, b] {
        assert!(s.spinning_now(t), "waiter {t} spins on the running owner");
    }
    (s, h, a, b)
}

#[test]
fn mutex_spinners_stop_when_the_owners_vcpu_is_preempted() {
    // owner_on_cpu(): owner->on_cpu && !vcpu_is_preempted(task_cpu(owner))
    let (mut s, h, a, _) = mutex_state(true);
    let (hv, av) = (s.threads[h].vcpu as usize, s.threads[a].vcpu as usize);
    s.vcpus[hv].st_preempted = true;
    s.pause_act(av);
    s.vcpu_step(av);
    assert_eq!(s.threads[a].state, TState::Blocked, "the spinner sleeps");
    // a 3.x / pre-4.10 guest does not ask: it keeps spinning on a preempted owner
    let (mut s, h, a, _) = mutex_state(false);
    let (hv, av) = (s.threads[h].vcpu as usize, s.threads[a].vcpu as usize);
    s.vcpus[hv].st_preempted = true;
    s.pause_act(av);
    s.vcpu_step(av);
    assert_eq!(s.threads[a].state, TState::Current);
    assert!(s.spinning_now(a));
}

#[test]
fn an_osq_spinner_gives_up_when_the_spinner_before_it_is_preempted() {
    // osq_lock: need_resched() || vcpu_is_preempted(node_cpu(node->prev))
    let (mut s, _, a, b) = mutex_state(true);
    let (av, bv) = (s.threads[a].vcpu as usize, s.threads[b].vcpu as usize);
    s.vcpus[av].st_preempted = true;
    s.pause_act(bv);
    s.vcpu_step(bv);
    assert_eq!(s.threads[b].state, TState::Blocked);
    assert_eq!(s.vcpus[bv].c.osq_gave_up, 1);
    assert!(matches!(s.threads[b].step, Step::AwaitLock { .. }), "it waits in the mutex's wait list");
    // the simple lock model has no OSQ: b spins on the (running) owner
    let mut c = locks(3, 3, LockKind::Mutex, 5_000_000);
    c.vms[0].guest.lock_model = LockModel::Simple;
    let mut s = sim_of(&c);
    s.step_until(5_000).unwrap();
    let l = &s.vms[0].locks[0];
    let (a, b) = (l.waiters[0] as usize, l.waiters[1] as usize);
    let (av, bv) = (s.threads[a].vcpu as usize, s.threads[b].vcpu as usize);
    s.vcpus[av].st_preempted = true;
    s.pause_act(bv);
    s.vcpu_step(bv);
    assert!(s.spinning_now(b));
}

#[test]
fn the_lock_kinds_differ_where_the_kernel_differs() {
    // 2 VMs × 8 vCPUs on 8 CPUs, no PLE (PAUSE exits disabled), one hot lock
    // (2 µs compute, 2 µs hold): a holder or the next waiter preempted by a
    // tick keeps the others waiting for milliseconds.
    let run = |kind: LockKind, guest: GuestConfig, pv_spinlocks: bool| {
        let mut c = locks(8, 8, kind, 2_000);
        c.duration_ns = 20_000_000;
        c.vms[0].count = 2;
        c.vms[0].guest = guest;
        c.vms[0].pv.pv_spinlocks = pv_spinlocks;
        c.vms[0].workload.spin_threshold = 32_768;
        c.vms[0].workload.phases.insert(0, Phase::Compute { ns: 2_000, dist: Dist::Exp, mode: Mode::User, prob: 1.0 });
        c.host.affinity = Affinity::Pinned;
        c.host.background.utilization = 0.1;
        super::super::run(&c).unwrap()
    };
    let simple = GuestConfig::default();
    let kernel = GuestConfig { lock_model: LockModel::Kernel, ..Default::default() };
    let ticket = run(LockKind::Ticket, simple.clone(), true);
    let queued = run(LockKind::Queued, simple.clone(), true);
    // ticket and native qspinlock are both strictly FIFO without stealing: the
    // model gives them the same run (they differ in cache traffic only)
    assert_eq!(ticket.vcpus, queued.vcpus);
    let pv = run(LockKind::PvQueued, kernel.clone(), true);
    assert_ne!(pv.vcpus, queued.vcpus);
    let sum = |r: &super::super::SimResult, c: &str| r.vcpus.u64s(c).iter().sum::<u64>();
    assert!(sum(&pv, "pv_wait_node") + sum(&pv, "pv_wait_head") > 0, "the PV path halts");
    assert!(sum(&pv, "kicks") > 0);
    // without PV_UNHALT the PV lock is test-and-set, exactly
    let fallback = run(LockKind::PvQueued, kernel, false);
    let tas = run(LockKind::Tas, simple, true);
    assert_eq!(fallback.vcpus, tas.vcpus);
    assert_eq!(sum(&fallback, "kicks"), 0);
}

// ------------------------------------------------- pcpu_is_idle (2021 RFC)

/// One VM, 2 vCPUs pinned on 2 CPUs, one thread (vCPU 1 halts), `bg` host
/// background load per CPU, wake-up placement `placement`.
fn rfc(placement: Placement, bg: f64) -> SimConfig {
    SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig {
            n_pcpus: 2,
            affinity: Affinity::RoundRobin,
            background: Background { utilization: bg, burst_ns: 200_000, weight: 1024 },
            ..Default::default()
        },
        vms: vec![VmConfig {
            vcpus: 2,
            threads: 1,
            pv: PvConfig { placement, ..Default::default() },
            workload: WorkloadConfig {
                phases: vec![
                    Phase::Compute { ns: 300_000, dist: Dist::Exp, mode: Mode::User, prob: 1.0 },
                    Phase::Sleep { ns: 100_000, dist: Dist::Exp, prob: 1.0, periodic: false },
                ],
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn the_is_idle_byte_is_a_snapshot_written_at_put_and_entry() {
    // vCPU 1 has no thread: it halts at once on CPU 1, which is otherwise idle
    // (nr_running 0 at its put): the byte is set
    let mut s = sim_of(&rfc(Placement::PcpuIsIdleRfcCleared, 0.0));
    s.step_until(50_000).unwrap();
    assert!(s.vcpus[1].halted && s.vcpus[1].st_is_idle);
    // record_steal_time: another vCPU entering on the CPU clears the previous
    // one's byte (the cleared variant), the same vCPU re-entering sets its own
    s.vcpus[0].st_is_idle = true;
    s.pre_run_vcpu[1] = 0;
    s.rfc_record_steal_time(1, 1);
    assert!(!s.vcpus[0].st_is_idle && s.pre_run_vcpu[1] == 1);
    s.vcpus[1].st_is_idle = false;
    s.rfc_record_steal_time(1, 1);
    assert!(s.vcpus[1].st_is_idle);
    // as posted, kvm_steal_time_clear_is_idle returns early on a set byte
    let mut s = sim_of(&rfc(Placement::PcpuIsIdleRfc, 0.0));
    s.step_until(50_000).unwrap();
    s.vcpus[0].st_is_idle = true;
    s.rfc_clear_is_idle(0);
    assert!(s.vcpus[0].st_is_idle, "the posted clear never clears a set byte");
}

#[test]
fn the_guest_sees_a_stale_is_idle_while_the_host_cpu_is_busy() {
    // with host background load on CPU 1, there are instants where vCPU 1 is
    // halted, its byte still says "idle" (written when it halted), and yet a
    // host task runs there: the live view (pcpu_is_idle) says busy
    let mut s = sim_of(&rfc(Placement::PcpuIsIdleRfcCleared, 0.5));
    let mut stale = 0;
    let mut fresh = 0;
    for k in 1..4000 {
        s.step_until(k * 10_000).unwrap();
        if s.vcpus[1].halted && s.vcpus[1].running.is_none() && s.guest_idle_cpu(1) {
            match (s.vcpus[1].st_is_idle, s.pcpu_is_idle(1)) {
                (true, false) => stale += 1,
                (true, true) => fresh += 1,
                _ => {}
            }
        }
    }
    assert!(stale > 0 && fresh > 0, "stale {stale}, fresh {fresh}");
    // and the placement reads the byte, not the host CPU
    let c = rfc(Placement::PcpuIsIdleRfcCleared, 0.5);
    let mut s = sim_of(&c);
    s.step_until(50_000).unwrap();
    s.vcpus[1].st_is_idle = true;
    s.vcpus[1].st_preempted = true; // no preemption check in available_idle_cpu_sched
    assert!(s.guest_idle_cpu(1));
    assert_eq!(s.place(0, 1), 1);
    // upstream available_idle_cpu refuses the preempted vCPU
    let mut c = c.clone();
    c.vms[0].pv.placement = Placement::AvailableIdle;
    let mut u = sim_of(&c);
    u.step_until(50_000).unwrap();
    u.vcpus[1].st_preempted = true;
    assert!(u.guest_idle_cpu(1) && u.vcpu_is_preempted(0, 1), "not available to available_idle_cpu");
}

#[test]
fn before_5_19_a_halted_vcpu_reads_as_preempted_and_available_idle_cpu_refuses_it() {
    // vCPU 1 has no thread: it halts at once and blocks on its idle CPU.
    // Today (instruction_boundary) the blocked vCPU is not preempted, so
    // available_idle_cpu takes it; with the 4.10-5.18 put (every_put) the
    // byte is set at the blocking put, so the wake-up falls back to prev.
    for (byte, preempted) in [(PreemptedByte::InstructionBoundary, false), (PreemptedByte::EveryPut, true)] {
        let mut c = rfc(Placement::AvailableIdle, 0.0);
        c.vms[0].pv.preempted_byte = byte;
        let mut s = sim_of(&c);
        s.step_until(50_000).unwrap();
        assert!(s.vcpus[1].halted && s.vcpus[1].running.is_none() && s.guest_idle_cpu(1));
        assert_eq!(s.vcpus[1].st_preempted, preempted, "{byte:?}");
        assert_eq!(s.vcpu_is_preempted(0, 1), preempted);
        assert_eq!(s.vcpus[1].c.preemption_reported, 0, "a blocking put is no reported preemption");
        // a thread whose previous vCPU (0) is busy: vCPU 1 is chosen only if available
        s.threads[0].vcpu = 0;
        let busy0 = !s.guest_idle_cpu(0);
        assert!(busy0, "vCPU 0 runs the thread");
        assert_eq!(s.place(0, 0), if preempted { 0 } else { 1 });
        // the RFC's available_idle_cpu_sched asks no preemption question
        let mut c = c.clone();
        c.vms[0].pv.placement = Placement::PcpuIsIdleRfc;
        let mut r = sim_of(&c);
        r.step_until(50_000).unwrap();
        assert_eq!(r.vcpus[1].st_preempted, preempted);
        assert!(r.vcpus[1].st_is_idle);
        assert_eq!(r.place(0, 0), 1);
        // entering the guest clears the byte (record_steal_time)
        s.step_until(2_000_000).unwrap();
        if s.vcpus[1].running.is_some() {
            assert!(!s.vcpus[1].st_preempted);
        }
    }
    // without steal time there is no byte to set
    let mut c = rfc(Placement::AvailableIdle, 0.0);
    c.vms[0].pv.preempted_byte = PreemptedByte::EveryPut;
    c.vms[0].pv.steal_time = false;
    let mut s = sim_of(&c);
    s.step_until(50_000).unwrap();
    assert!(s.vcpus[1].halted && !s.vcpus[1].st_preempted);
}

// ------------------------------------------------- guest load balancing

/// One VM of `v` vCPUs pinned on `v` CPUs, `t` threads that compute 20 ms
/// after a 1 ms sleep, the guest's load balancing on.
fn guest_lb(v: u32, t: u32) -> SimConfig {
    SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig { n_pcpus: v, affinity: Affinity::RoundRobin, ..Default::default() },
        vms: vec![VmConfig {
            vcpus: v,
            threads: t,
            guest: GuestConfig { load_balance: true, ..Default::default() },
            workload: WorkloadConfig {
                phases: vec![
                    Phase::Sleep { ns: 1_000_000, dist: Dist::Fixed, prob: 1.0, periodic: false },
                    Phase::Compute { ns: 20_000_000, dist: Dist::Fixed, mode: Mode::User, prob: 1.0 },
                ],
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// At 0.6 ms every thread sleeps and every vCPU is halted; queue threads
/// 1 and 2 on vCPU 0 (stacked, woken), cold unless `hot`.
fn stacked(c: &SimConfig, hot: bool) -> Sim {
    let mut s = sim_of(c);
    s.step_until(600_000).unwrap();
    assert!((0..s.vcpus.len()).all(|v| s.vcpus[v].halted && s.guest_idle_cpu(v)));
    assert!(s.now < 600_000);
    s.now = 600_000; // nothing happens until the sleeps end at 1 ms
    for t in [1usize, 2] {
        let th = &mut s.threads[t];
        th.wake_gen = th.wake_gen.wrapping_add(1); // its sleep timer is void
        th.state = TState::Ready;
        th.vcpu = 0;
        th.last_ran = if hot { 500_000 } else { 0 };
        s.advance(t); // past its sleep: the next phase computes
        s.vcpus[0].runq.push_back(t as u32);
    }
    s.vcpu_host_wake(0, WakeReason::Ipi);
    s
}

#[test]
fn newidle_balance_pulls_a_cold_waiting_thread_unless_idle_periods_are_short() {
    let c = guest_lb(3, 3);
    // avg_idle starts at 2 x migration cost (1 ms): vCPU 1, about to idle, pulls
    let mut s = stacked(&c, false);
    assert_eq!(s.vcpus[1].avg_idle, 1_000_000);
    assert!(s.guest_newidle_balance(1));
    assert_eq!(s.vcpus[1].runq.front(), Some(&1));
    assert_eq!((s.threads[1].vcpu, s.vcpus[1].c.guest_pulls), (1, 1));
    // short idle periods (avg_idle < sysctl_sched_migration_cost): no newidle balance
    let mut s = stacked(&c, false);
    s.vcpus[1].avg_idle = 400_000;
    assert!(!s.guest_newidle_balance(1));
    // task_hot: a thread that ran less than the migration cost ago stays
    let mut s = stacked(&c, true);
    assert!(!s.guest_newidle_balance(1));
    // update_avg: an idle period of 0.2 ms moves avg_idle 1/8 of the way
    let mut s = sim_of(&c);
    s.vcpus[2].idle_stamp = Some(0);
    s.now = 200_000;
    s.guest_idle_ends(2);
    assert_eq!((s.vcpus[2].avg_idle, s.vcpus[2].idle_stamp), (1_000_000 - 100_000, None));
}

#[test]
fn a_tick_of_a_stacked_vcpu_kicks_the_nohz_idle_balance_once_per_interval() {
    let c = guest_lb(3, 3);
    let mut s = stacked(&c, false);
    s.guest_nohz_balance(0);
    // one thread moves to the first idle vCPU, which is woken; vCPU 0 keeps one
    assert_eq!((s.threads[1].vcpu, s.threads[2].vcpu), (1, 0));
    assert!(!s.vcpus[1].halted && s.ready[1], "the pulling vCPU is woken");
    assert_eq!(s.vcpus[1].c.guest_pulls + s.vcpus[2].c.guest_pulls, 1);
    assert_eq!(s.vms[0].nohz_next, 600_000 + 3_000_000, "sd_weight ms");
    // both threads then compute at the same time on two vCPUs
    s.step_until(1_500_000).unwrap();
    assert_eq!(s.vcpus[0].cur, Some(2));
    assert_eq!(s.vcpus[1].cur, Some(1));
    // before the interval has passed a tick balances nothing
    let mut s = stacked(&c, false);
    s.vms[0].nohz_next = 5_000_000;
    s.guest_nohz_balance(0);
    assert_eq!(s.threads[1].vcpu, 0);
    assert!(s.vms[0].lb_pending, "the next guest tick looks again");
    // without load balancing nothing moves: the thread waits on vCPU 0
    let mut off = c.clone();
    off.vms[0].guest.load_balance = false;
    let mut s = stacked(&off, false);
    s.step_until(1_500_000).unwrap();
    assert_eq!((s.threads[1].vcpu, s.threads[2].vcpu), (0, 0));
    assert_eq!(s.vcpus.iter().map(|v| v.c.guest_pulls).sum::<u64>(), 0);
}

// ------------------------------------------------- reader-writer semaphores

/// One VM, 4 vCPUs on 4 CPUs, one thread each, looping: 10 µs compute,
/// rwsem 0 for reading (`read_hold_ns`), then for writing (5 µs).
fn rwsem(read_hold_ns: u64) -> SimConfig {
    SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig { n_pcpus: 4, affinity: Affinity::RoundRobin, ..Default::default() },
        vms: vec![VmConfig {
            vcpus: 4,
            ple: PleConfig { enabled: false, ..Default::default() },
            policy: PolicyConfig { kind: PolicyKind::NoYield, ..Default::default() },
            workload: WorkloadConfig {
                phases: vec![
                    Phase::Compute { ns: 10_000, dist: Dist::Fixed, mode: Mode::User, prob: 1.0 },
                    Phase::Lock {
                        lock: 0,
                        lock_kind: LockKind::RwsemRead,
                        hold_ns: read_hold_ns,
                        dist: Dist::Fixed,
                        prob: 1.0,
                        sites: 1,
                        irqs_off: false,
                    },
                    Phase::Lock {
                        lock: 0,
                        lock_kind: LockKind::RwsemWrite,
                        hold_ns: 5_000,
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
    }
}

#[test]
fn rwsem_readers_share_a_writer_excludes_and_the_release_wakes_the_right_side() {
    let mut s = sim_of(&rwsem(1_000_000));
    assert_eq!(s.vms[0].locks[0].kind, LockKind::RwsemWrite, "the lock is the semaphore");
    // at 10 µs every thread enters its read phase at once: all four read together
    s.step_until(20_000).unwrap();
    let l = &s.vms[0].locks[0];
    assert_eq!((l.readers, l.holder, l.waiters.len()), (4, None, 0));
    assert!((0..4).all(|t| matches!(s.threads[t].step, Step::Work { hold: Some(0), .. })));
    // a writer needs it free
    s.threads[0].rw_read = false;
    assert!(!s.rwsem_try(0, 0, 0, true));
    // by hand: 3 readers release; a writer and two readers wait (sleeping)
    for t in [1usize, 2, 3] {
        s.rwsem_release(0, 0, t);
    }
    assert_eq!(s.vms[0].locks[0].readers, 1);
    s.threads[0].rw_read = true; // thread 0 still reads
    for (t, read) in [(1usize, false), (2, true), (3, true)] {
        let v = s.threads[t].vcpu as usize;
        s.threads[t].rw_read = read;
        s.threads[t].step = Step::AwaitLock { lock: 0 };
        s.vms[0].locks[0].waiters.push_back(t as u32);
        s.block_current(v, t);
    }
    // a newcomer reader waits behind waiters (RWSEM_FLAG_WAITERS), the slow path lets it in
    s.threads[2].rw_read = true;
    assert!(!s.rwsem_try(0, 0, 2, true));
    // the last reader out wakes the first waiter, the writer, alone
    s.rwsem_release(0, 0, 0);
    let l = &s.vms[0].locks[0];
    assert_eq!((l.holder, l.readers), (Some(1), 0));
    assert_eq!(l.waiters.iter().copied().collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(s.threads[1].state, TState::Ready, "the writer is woken");
    // the writer's release grants every waiting reader
    s.rwsem_release(0, 0, 1);
    let l = &s.vms[0].locks[0];
    assert_eq!((l.holder, l.readers, l.waiters.len()), (None, 2, 0));
    assert!(s.threads[2].rw_granted && s.threads[3].rw_granted);
    assert!(s.threads[2].state == TState::Ready && s.threads[3].state == TState::Ready);
}

#[test]
fn rwsem_runs_live_and_its_acquisitions_add_up() {
    // 4 threads alternate a 20 µs read side and a 5 µs write side: no thread
    // stalls, every grant is matched by a release
    let mut s = sim_of(&rwsem(20_000));
    let mut shared = 0;
    for k in 1..=5000 {
        s.step_until(k * 10_000).unwrap();
        let l = &s.vms[0].locks[0];
        assert!(l.readers <= 4 && (l.holder.is_none() || l.readers == 0), "a writer never shares");
        let holding = s.threads.iter().filter(|t| matches!(t.step, Step::Work { hold: Some(0), .. })).count();
        assert_eq!(holding as u32, l.readers + u32::from(l.holder.is_some()), "holders at {} ns", s.now);
        shared += usize::from(l.readers >= 2);
    }
    let l = &s.vms[0].locks[0];
    assert!(l.acquisitions > 1000, "{}", l.acquisitions);
    assert!(s.threads.iter().all(|t| t.iters > 100));
    assert!(shared > 0, "readers held it together");
}

#[test]
fn before_5_13_kvm_sched_yield_boosts_a_waiting_target_even_from_an_idle_queue() {
    // 3 vCPUs round robin on 2 CPUs: vCPU 1 runs alone on CPU 1, vCPUs 0 and 2
    // share CPU 0, so one of them is ready and waiting there
    for bailout in [true, false] {
        let mut c = locks(3, 2, LockKind::PvQueued, 1_000);
        c.vms[0].workload.phases =
            vec![Phase::Compute { ns: 50_000_000, dist: Dist::Fixed, mode: Mode::User, prob: 1.0 }];
        c.vms[0].pv.yield_single_task_bailout = bailout;
        let mut s = sim_of(&c);
        s.step_until(1_000_000).unwrap();
        let waiting = if s.vcpus[0].running.is_some() { 2 } else { 0 };
        assert!(s.ready[waiting] && s.vcpus[1].running.is_some() && s.nr_running(1) == 1);
        let mut t = s.now;
        let ok = s.kvm_sched_yield(1, waiting, &mut t);
        assert_eq!(s.vcpus[1].c.directed_yield_attempted, 1);
        // 5.13+: single_task_running() on the yielder's CPU ends it at once; before,
        // yield_to boosts the target on its own queue (CPU 0 runs two tasks: no -ESRCH)
        assert_eq!(ok, !bailout, "bailout {bailout}");
        assert_eq!(s.vcpus[1].c.directed_yield_successful, u64::from(!bailout));
    }
}

// ------------------------------------------------------------- task queues

/// One VM of 3 vCPUs on 2 CPUs (round robin: vCPUs 0 and 2 share CPU 0),
/// one thread per vCPU, 10 frames of 3 ms of work: 30 tasks of 100 µs from
/// a task queue, or a static split (1 ms per thread, then a barrier).
fn frames(queue: bool) -> SimConfig {
    let task = |ns| Phase::Compute { ns, dist: Dist::Fixed, mode: Mode::User, prob: 1.0 };
    let (phases, iterations) = if queue {
        (vec![Phase::TaskQueue { tasks: 30, frames: 10, prob: 1.0 }, task(100_000)], 0)
    } else {
        (vec![task(1_000_000), Phase::Barrier { prob: 1.0 }], 10)
    };
    SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig { n_pcpus: 2, affinity: Affinity::RoundRobin, ..Default::default() },
        vms: vec![VmConfig {
            vcpus: 3,
            ple: PleConfig { enabled: false, ..Default::default() },
            policy: PolicyConfig { kind: PolicyKind::NoYield, ..Default::default() },
            workload: WorkloadConfig { phases, iterations, ..Default::default() },
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn a_task_queue_runs_its_frames_and_moves_work_to_the_faster_vcpu() {
    // tasks × frames operations, every thread ends with the last frame;
    // the thread alone on CPU 1 takes more tasks than the two sharing CPU 0,
    // so the frames end sooner than with a static split, which waits for
    // the slowest thread at each barrier
    let run = |queue| {
        let mut s = sim_of(&frames(queue));
        s.step_until(1_000_000_000).unwrap();
        assert!(s.threads.iter().all(|t| t.state == TState::Done), "every thread ends");
        (s.vms[0].finished_at.expect("the VM finishes"), s.vms[0].ops, s.vms[0].tq_frames)
    };
    let (queue_ns, ops, frames_done) = run(true);
    let (static_ns, _, _) = run(false);
    assert_eq!((ops, frames_done), (300, 10));
    assert!(queue_ns * 10 < static_ns * 9, "task queue {queue_ns} ns, static split {static_ns} ns");
}

#[test]
fn a_task_queue_needs_to_be_alone_with_no_barrier_or_iterations() {
    let bad = |f: &dyn Fn(&mut WorkloadConfig)| {
        let mut c = frames(true);
        f(&mut c.vms[0].workload);
        c.validate().expect_err("refused")
    };
    assert!(bad(&|w| w.iterations = 5).contains("task_queue"));
    assert!(bad(&|w| w.phases.push(Phase::Barrier { prob: 1.0 })).contains("task_queue"));
    assert!(bad(&|w| w.phases.push(Phase::TaskQueue { tasks: 1, frames: 0, prob: 1.0 })).contains("task_queue"));
    assert!(bad(&|w| w.phases[0] = Phase::TaskQueue { tasks: 0, frames: 0, prob: 1.0 }).contains("tasks"));
    assert!(bad(&|w| w.phases[0] = Phase::TaskQueue { tasks: 3, frames: 0, prob: 0.5 }).contains("prob"));
}

/// `locks(…)` with each acquisition taking one of `sites` locks.
fn sited(v: u32, p: u32, kind: LockKind, hold_ns: u64, sites: u32) -> SimConfig {
    let mut c = locks(v, p, kind, hold_ns);
    c.vms[0].workload.phases = vec![
        Phase::Compute { ns: hold_ns, dist: Dist::Exp, mode: Mode::User, prob: 1.0 },
        Phase::Lock { lock: 0, lock_kind: kind, hold_ns, dist: Dist::Exp, prob: 1.0, sites, irqs_off: false },
    ];
    c.duration_ns = 50_000_000;
    c
}

#[test]
fn lock_sites_spread_the_acquisitions_evenly_and_a_single_site_serialises() {
    // 8 vCPUs on 8 CPUs, each thread computing 5 µs and holding 5 µs: one
    // lock is wanted 8 × 0.5 = 4 times over and serialises the VM (at most
    // one hold at a time); over 8 sites each is wanted half the time.
    let one = {
        let mut s = sim_of(&sited(8, 8, LockKind::Ticket, 5_000, 1));
        s.step_until(50_000_000).unwrap();
        s.vms[0].locks.iter().map(|l| l.acquisitions).collect::<Vec<_>>()
    };
    assert_eq!(one.len(), 1);
    // at most one 5 µs hold at a time (exponential holds: a little slack)
    assert!(one[0] <= 50_000_000 / 5_000 * 11 / 10, "one site: {} acquisitions in 50 ms", one[0]);
    let mut s = sim_of(&sited(8, 8, LockKind::Ticket, 5_000, 8));
    s.step_until(50_000_000).unwrap();
    let acq: Vec<u64> = s.vms[0].locks.iter().map(|l| l.acquisitions).collect();
    assert_eq!(acq.len(), 8, "locks 0..8 exist");
    let total: u64 = acq.iter().sum();
    assert!(total > 2 * one[0], "8 sites: {total} acquisitions against {} on one", one[0]);
    // uniform choice: each site within 15 % of the mean (n ≈ 5,000 a site, σ ≈ 1.3 %)
    let mean = total as f64 / 8.0;
    for (i, &a) in acq.iter().enumerate() {
        assert!((a as f64 - mean).abs() < 0.15 * mean, "site {i}: {a} of {total}");
    }
}

#[test]
fn lock_sites_are_validated_and_omitted_at_their_default() {
    let c = sited(2, 2, LockKind::Ticket, 1_000, 1);
    assert!(!c.to_json().contains("sites"), "sites = 1 leaves the JSON as it was");
    let c = sited(2, 2, LockKind::Ticket, 1_000, 4);
    assert!(c.to_json().contains("\"sites\":4"));
    assert!(c.validate().is_ok());
    // the last site past the largest lock id
    let mut c = sited(2, 2, LockKind::Ticket, 1_000, 1000);
    if let Phase::Lock { lock, .. } = &mut c.vms[0].workload.phases[1] {
        *lock = 100;
    }
    let e = c.validate().unwrap_err();
    assert!(e.contains("phases[1].sites") && e.contains("1099"), "{e}");
    // zero sites: the schema's minimum
    let mut c = sited(2, 2, LockKind::Ticket, 1_000, 0);
    let e = c.validate().unwrap_err();
    assert!(e.contains("sites") && e.contains(">= 1"), "{e}");
    // a later phase's lock inside the sites of an earlier one must agree on the kind
    c = sited(2, 2, LockKind::Ticket, 1_000, 4);
    c.vms[0].workload.phases.push(Phase::Lock {
        lock: 3,
        lock_kind: LockKind::Mutex,
        hold_ns: 1_000,
        dist: Dist::Fixed,
        prob: 1.0,
        sites: 1,
        irqs_off: false,
    });
    let e = c.validate().unwrap_err();
    assert!(e.contains("phases[2].lock_kind") && e.contains("lock 3"), "{e}");
}

/// `Lock.irqs_off` (`spin_lock_irqsave`): with the holder and the halted
/// head both in the lock with interrupts off, an IPI sent to them waits:
/// the head, halted in `pv_wait` with IF=0, stays blocked (only its kick
/// wakes it), and the holder runs no handler before its release; after the
/// release both run the handler. With interrupts on, the IPI wakes the
/// halted head at once (a spurious wake-up of `pv_wait`, as `safe_halt`).
#[test]
fn an_irqs_off_lock_defers_ipis_and_a_halted_waiter_wakes_on_its_kick_only() {
    for irqs_off in [true, false] {
        let mut c = locks(3, 3, LockKind::PvQueued, 2_000_000);
        if let Phase::Lock { irqs_off: f, .. } = &mut c.vms[0].workload.phases[0] {
            *f = irqs_off;
        }
        let mut s = sim_of(&c);
        s.step_until(1_000_000).unwrap();
        let (h, w) = holder_and_head(&s);
        let (hv, wv) = (s.threads[h].vcpu as usize, s.threads[w].vcpu as usize);
        assert!(s.vcpus[wv].halted, "the head halted in pv_wait");
        assert_eq!((s.threads[h].irqs_off, s.threads[w].irqs_off), (irqs_off, irqs_off));
        // an IPI from outside the lock to both (a thread of the third vCPU as the sender)
        let sender = (0..3).find(|&t| t != h && t != w).unwrap();
        for v in [hv, wv] {
            s.vcpus[v].ipis.push_back(sender as u32);
            s.vcpu_host_wake(v, WakeReason::Ipi);
        }
        s.step_until(1_100_000).unwrap();
        if irqs_off {
            assert!(s.vcpus[wv].halted && s.vcpus[wv].ipis.len() == 1, "IF=0: the IPI does not wake it");
            assert_eq!(s.vcpus[hv].ipis.len(), 1, "the holder runs no handler inside the lock");
        } else {
            assert!(s.vcpus[hv].ipis.is_empty(), "interrupts on: the holder ran the handler");
            assert!(s.vcpus[wv].ipis.is_empty(), "and the IPI woke the head, which ran it");
        }
        // the release at 2 ms: the holder's handler runs, the kick wakes the head, which takes
        // the lock and (interrupts off until its own release) runs its handler after that
        s.step_until(4_200_000).unwrap();
        assert!(s.vcpus[hv].ipis.is_empty() && s.vcpus[wv].ipis.is_empty(), "irqs_off {irqs_off}");
    }
}

/// One VM of `v` vCPUs on `v` CPUs, one thread per vCPU computing 100 µs
/// per operation, each vCPU starting with `start_ns` of guest work.
fn starting(v: u32, start_ns: u64) -> SimConfig {
    SimConfig {
        duration_ns: 2_000_000,
        host: HostConfig { n_pcpus: v, affinity: Affinity::RoundRobin, ..Default::default() },
        vms: vec![VmConfig {
            vcpus: v,
            ple: PleConfig { enabled: false, ..Default::default() },
            policy: PolicyConfig { kind: PolicyKind::NoYield, ..Default::default() },
            guest: GuestConfig { vcpu_start_ns: start_ns, ..Default::default() },
            workload: WorkloadConfig {
                phases: vec![Phase::Compute { ns: 100_000, dist: Dist::Fixed, mode: Mode::User, prob: 1.0 }],
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn a_vcpu_runs_its_start_before_its_guest_scheduler_picks_a_thread() {
    let mut s = sim_of(&starting(2, 300_000));
    s.step_until(299_000).unwrap();
    for v in 0..2 {
        assert!(
            matches!(s.vcpus[v].act, Act::Exec { what: ExecWhat::Start, .. }),
            "vCPU {v} still starting: {:?}",
            s.vcpus[v].act
        );
        assert_eq!(s.vcpus[v].cur, None, "no thread picked yet");
    }
    s.step_until(301_000).unwrap();
    for v in 0..2 {
        assert!(matches!(s.vcpus[v].act, Act::Exec { what: ExecWhat::Thread, .. }), "{:?}", s.vcpus[v].act);
        assert_eq!(s.vcpus[v].start_rem, 0);
    }
    // 2 ms of 100-µs operations: a 300-µs start costs each vCPU 3 of them
    let ops = |c: &SimConfig| crate::sim::run(c).unwrap().summary.u64s("ops")[0];
    let (plain, started) = (ops(&starting(2, 0)), ops(&starting(2, 300_000)));
    assert_eq!(plain - started, 6, "{plain} {started}");
}

#[test]
fn a_preempted_start_goes_on_where_it_stopped() {
    // two vCPUs on one CPU, each starting with 10 ms of guest work: the
    // host's slices interleave the two starts, and each vCPU picks its
    // thread after 10 ms of its own start, not 10 ms after it first ran
    let mut c = starting(2, 10_000_000);
    c.duration_ns = 40_000_000;
    c.host.n_pcpus = 1;
    c.host.affinity = Affinity::Pinned;
    let mut s = sim_of(&c);
    const DT: u64 = 10_000;
    let mut starting_ns = [0u64; 2];
    let mut first_ran: [Option<u64>; 2] = [None; 2];
    let mut picked: [Option<u64>; 2] = [None; 2];
    for step in 1..=3_000u64 {
        s.step_until(step * DT).unwrap();
        for v in 0..2 {
            if s.vcpus[v].running.is_some() {
                first_ran[v].get_or_insert(step * DT);
                if matches!(s.vcpus[v].act, Act::Exec { what: ExecWhat::Start, .. }) {
                    starting_ns[v] += DT;
                }
            }
            if picked[v].is_none() && s.vcpus[v].cur.is_some() {
                picked[v] = Some(step * DT);
            }
        }
    }
    for v in 0..2 {
        let (first, pick) = (first_ran[v].unwrap(), picked[v].expect("the thread runs after the start"));
        assert!(starting_ns[v].abs_diff(10_000_000) <= 2 * DT, "vCPU {v} started {} ns", starting_ns[v]);
        assert!(pick >= first + 10_000_000, "vCPU {v}: first ran {first}, picked {pick}");
    }
    // the host interleaved them: one start was preempted by the other
    let (a, b) = (picked[0].unwrap(), picked[1].unwrap());
    assert!(a.max(b) - first_ran[if a > b { 0 } else { 1 }].unwrap() > 10_000_000 + 2 * DT, "{a} {b} {first_ran:?}");
}

#[test]
fn vcpu0_waits_for_every_other_vcpus_start_when_told() {
    // three vCPUs on two CPUs (vCPUs 0 and 2 share CPU 0), one thread (on
    // vCPU 0), 300-µs starts: with the wait, vCPU 0 spins after its start
    // until vCPUs 1 and 2 have run theirs and are idle (vCPU 2 only when the
    // host preempts the spinning vCPU 0), and only then runs its thread
    for wait in [false, true] {
        let mut c = starting(3, 300_000);
        c.duration_ns = 40_000_000;
        c.host.n_pcpus = 2;
        c.vms[0].threads = 1;
        c.vms[0].guest.vcpu0_waits_for_starts = wait;
        let mut s = sim_of(&c);
        let (mut picked, mut spun) = (None, false);
        for step in 1..=20_000u64 {
            s.step_until(step * 1_000).unwrap();
            spun |= matches!(s.vcpus[0].act, Act::Spin { .. }) && s.vcpus[0].running.is_some();
            if picked.is_none() && s.vcpus[0].cur.is_some() {
                picked = Some((step * 1_000, s.vcpus[1].started && s.vcpus[2].started));
            }
        }
        let (at, others_started) = picked.expect("vCPU 0 runs its thread");
        if wait {
            assert!(others_started && spun, "picked at {at} ns before the others started");
            assert!(at >= 600_000, "{at}");
        } else {
            assert!(!spun);
            assert!(at <= 302_000, "{at}");
        }
    }
}

#[test]
fn a_queued_pv_acquisition_records_its_wait() {
    // Kernel lock model, two vCPUs on two CPUs taking turns on a lock held
    // 2 ms: every acquisition after the first is a queued one (the head
    // halts and is kicked at the unlock), so the VM's lock-wait histogram
    // holds one wait per acquisition, each about one hold long. (Until
    // 0.3.28 the queue head's acquisition in `pv_wait_head_or_lock` recorded
    // nothing: the histogram held only the uncontended acquisitions, 0 ns.)
    let c = locks(2, 2, LockKind::PvQueued, 2_000_000);
    let mut s = sim_of(&c);
    s.step_until(20_000_000).unwrap();
    let waits: u64 = s.vms[0].lock_waits.iter().sum();
    let acq = s.vms[0].locks[0].acquisitions;
    assert!(acq >= 9, "{acq} acquisitions in 20 ms");
    assert_eq!(waits, acq, "one recorded wait per acquisition");
    let mean = crate::sim::hist::hist_mean(&s.vms[0].lock_waits);
    assert!(mean > 1_500_000.0, "mean wait {mean} ns: a queued waiter waits about one 2-ms hold");
}

/// Three vCPUs on two CPUs (round-robin: vCPUs 0 and 2 share CPU 0), one
/// thread each looping on a lock held 2 ms, kernel lock model. By 3 ms
/// (asserted, not assumed): thread 1 holds the lock, thread 2 is the queue
/// head, halted in `pv_wait` (so the pending bit is clear), and thread 0,
/// back from its own hold, has entered the slow path behind it.
fn late_arrival(steal: PvLockSteal) -> Sim {
    let mut c = locks(3, 2, LockKind::PvQueued, 2_000_000);
    c.vms[0].guest.pv_lock_steal = steal;
    let mut s = sim_of(&c);
    s.step_until(3_000_000).unwrap();
    let l = &s.vms[0].locks[0];
    assert_eq!(l.holder, Some(1), "thread 1 holds");
    assert_eq!(l.waiters.front(), Some(&2), "thread 2 is the head");
    assert!(s.threads[2].pv_halted && !l.pending, "the head halted and cleared the pending bit");
    s
}

#[test]
fn hybrid_a_late_waiter_spins_unqueued_and_takes_the_lock_ahead_of_a_halted_head() {
    // pv_hybrid_queued_unfair_trylock (11752adb68a3): a queue exists and its
    // head has not set the pending bit, so thread 0 stays in the unfair loop
    // (spinning on the lock word, not queued); the unlock frees the lock,
    // thread 0's cmpxchg wins it, and the halted head is kicked as before.
    let mut s = late_arrival(PvLockSteal::Hybrid);
    let l = &s.vms[0].locks[0];
    assert!(s.threads[0].pv_unfair && l.unfair == vec![0], "in the unfair loop");
    assert_eq!(l.waiters.iter().copied().collect::<Vec<_>>(), vec![2], "not queued");
    let v0 = s.threads[0].vcpu as usize;
    assert!(matches!(s.vcpus[v0].act, Act::Spin { .. }), "spinning");
    assert!(!s.threads[0].pv_halted, "the unfair loop never halts");
    let v1 = s.threads[1].vcpu as usize;
    s.step_until(4_020_000).unwrap();
    let l = &s.vms[0].locks[0];
    assert_eq!(l.holder, Some(0), "the unfair spinner took the freed lock");
    assert_eq!(s.vcpus[v0].c.lock_steals, 1);
    assert_eq!(s.vcpus[v1].c.kicks, 1, "the unlock still kicked the halted head");
    assert!(!s.threads[0].pv_unfair);
    // the kicked head runs and spins with the pending bit set; thread 1,
    // back for more, queues behind it instead of entering the unfair loop
    assert!(l.pending && !s.threads[2].pv_halted, "the woken head spins with the pending bit set");
    assert_eq!(l.waiters.iter().copied().collect::<Vec<_>>(), vec![2, 1]);
    assert!(!s.threads[1].pv_unfair && l.unfair.is_empty());
}

#[test]
fn once_a_late_waiter_queues_behind_the_halted_head() {
    // v4.5-v4.14: one steal attempt at entry (the lock is held), then the
    // queue: behind a halted node it waits early (halts), and the kicked
    // head takes the lock at the unlock
    let mut s = late_arrival(PvLockSteal::Once);
    let l = &s.vms[0].locks[0];
    assert!(!s.threads[0].pv_unfair && l.unfair.is_empty());
    assert_eq!(l.waiters.iter().copied().collect::<Vec<_>>(), vec![2, 0]);
    assert!(s.threads[0].pv_halted, "pv_wait_early: its predecessor is halted");
    s.step_until(4_020_000).unwrap();
    assert_eq!(s.vms[0].locks[0].holder, Some(2), "the kicked head took the lock");
    assert_eq!(s.vcpus[s.threads[0].vcpu as usize].c.lock_steals, 0);
}

#[test]
fn a_free_lock_behind_a_halted_head_is_stolen_only_from_v4_5() {
    // the lock word free, the queue's head halted (no pending bit): `Once`
    // and `Hybrid` take it at the slow path's entry, `None` (v4.2-v4.4)
    // does not; with the pending bit set (a spinning head) none does
    for (steal, stolen) in [(PvLockSteal::None, false), (PvLockSteal::Once, true), (PvLockSteal::Hybrid, true)] {
        let mut s = late_arrival(steal);
        let v0 = s.threads[0].vcpu as usize;
        s.vms[0].locks[0].holder = None;
        assert_eq!(s.pv_steal(v0, 0, 0, 0), stolen, "{steal:?}");
        s.vms[0].locks[0].holder = None;
        s.vms[0].locks[0].pending = true;
        assert!(!s.pv_steal(v0, 0, 0, 0), "{steal:?} with the pending bit");
    }
}

#[test]
fn before_v4_5_a_queue_node_spins_its_threshold_behind_a_halted_node() {
    // WaitEarly::Never (v4.2-v4.4, before cd0272fab785): the node behind a
    // halted head spins its own SPIN_THRESHOLD (19.5 µs) before it halts
    let mut c = locks(3, 3, LockKind::PvQueued, 50_000_000);
    c.vms[0].guest.pv_wait_early = WaitEarly::Never;
    let mut s = sim_of(&c);
    s.step_until(1_000_000).unwrap();
    let l = &s.vms[0].locks[0];
    let (head, node) = (l.waiters[0] as usize, l.waiters[1] as usize);
    let nv = s.threads[node].vcpu as usize;
    assert!(s.threads[head].pv_halted && s.threads[node].pv_halted);
    assert_eq!((s.vcpus[nv].c.pv_wait_node, s.vcpus[nv].c.pv_wait_early), (1, 0));
    let spun = s.vcpus[nv].acct.acc[super::super::state::C_SPIN];
    assert!((19_000..=21_000).contains(&spun), "spun {spun} ns, the threshold is 19.5 µs");
}
