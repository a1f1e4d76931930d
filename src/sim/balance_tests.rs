//! Placement and balancing rules on a hand-built 2-socket SMT host.

use super::super::config::*;
use super::super::engine::Sim;
use crate::sim::test_util::{computing_vm, pcpu_time, sim_of};

/// 2 sockets × 4 cores × 2 threads = 16 CPUs (CPU i: core i mod 8, socket
/// (i mod 8) / 4; siblings i and i + 8), `v` unpinned vCPUs computing forever.
fn two_socket_smt(v: u32) -> SimConfig {
    SimConfig {
        duration_ns: 1_000_000_000,
        host: HostConfig {
            n_pcpus: 16,
            sockets: 2,
            threads_per_core: 2,
            affinity: Affinity::All,
            wake_placement: WakePlacement::SelectTaskRqFair,
            load_balance: true,
            ..Default::default()
        },
        vms: vec![computing_vm(v)],
        ..Default::default()
    }
}

/// Mark CPUs busy (a task as curr) on a not-started simulation.
fn busy(s: &mut Sim, cpus: &[usize]) {
    for &c in cpus {
        s.rqs[c].curr = Some(0);
    }
}

#[test]
fn topology_numbers_cores_siblings_and_llcs_like_linux_on_x86() {
    let s = sim_of(&two_socket_smt(4));
    assert_eq!(s.core_cpus(1).collect::<Vec<_>>(), vec![1, 9]);
    assert_eq!(s.llc_cpus(9), vec![0, 1, 2, 3, 8, 9, 10, 11]);
    assert_eq!(s.llc_cpus(12), vec![4, 5, 6, 7, 12, 13, 14, 15]);
    assert!(s.share_llc(3, 11) && !s.share_llc(3, 4));
}

#[test]
fn select_idle_sibling_prefers_target_then_prev_then_an_idle_core_then_an_idle_cpu_of_the_llc() {
    let mut s = sim_of(&two_socket_smt(4));
    assert_eq!(s.select_idle_sibling(5, 0), 0, "idle target");
    busy(&mut s, &[0]);
    assert_eq!(s.select_idle_sibling(9, 0), 9, "idle prev in the target's LLC");
    assert_ne!(s.select_idle_sibling(4, 0), 4, "prev in another LLC is not taken");
    // socket 0: CPU 1 idle but its sibling 9 busy; core 2 (2, 10) busy; core 3 (3, 11) idle
    let mut s = sim_of(&two_socket_smt(4));
    busy(&mut s, &[0, 8, 9, 2, 10]);
    assert_eq!(s.select_idle_sibling(0, 0), 3, "the first fully idle core, past the idle CPU 1");
    // no idle core in socket 0: the first idle CPU after the target
    let mut s = sim_of(&two_socket_smt(4));
    busy(&mut s, &[0, 8, 9, 2, 3, 11]);
    assert_eq!(s.select_idle_sibling(0, 0), 1);
    // socket 0 full, socket 1 idle: the wake-up stays on the target
    let mut s = sim_of(&two_socket_smt(4));
    busy(&mut s, &[0, 1, 2, 3, 8, 9, 10, 11]);
    assert_eq!(s.select_idle_sibling(0, 0), 0);
    // the scan wraps around from target + 1
    let mut s = sim_of(&two_socket_smt(4));
    busy(&mut s, &[0, 1, 2, 3, 9, 10, 11]);
    assert_eq!(s.select_idle_sibling(10, 10), 8);
}

#[test]
fn wake_affine_takes_an_idle_waker_cpu_of_the_same_llc_and_otherwise_compares_loads() {
    let mut s = sim_of(&two_socket_smt(4));
    let t = s.vcpus[0].task as usize;
    busy(&mut s, &[1]);
    assert_eq!(s.wake_affine(t, 2, 1), 2, "idle waker CPU, same LLC, busy prev");
    assert_eq!(s.wake_affine(t, 2, 3), 3, "idle prev wins over an idle waker");
    // the waker's CPU in the other socket, idle: loads decide (0 + 1024)·100 < 1024·108
    let (w0, w1) = (s.vcpus[0].task, s.vcpus[1].task);
    s.rqs[1].curr = Some(w0);
    s.tasks[w0 as usize].runnable = true;
    assert_eq!(s.wake_affine(t, 4, 1), 4);
    // a busy waker CPU with as much load as prev: stay on prev
    s.rqs[4].curr = Some(w1);
    s.tasks[w1 as usize].runnable = true;
    assert_eq!(s.wake_affine(t, 4, 1), 1);
}

#[test]
fn load_balancing_spreads_tasks_started_on_one_cpu_over_both_sockets() {
    let c = two_socket_smt(32);
    let mut s = sim_of(&c);
    for t in 0..s.tasks.len() {
        s.tasks[t].cpu = 0;
    }
    s.step_until(1).unwrap();
    // the start keeps the start CPU (fork placement, not the wake-up path)
    assert_eq!(s.nr_running(0), 32);
    s.step_until(900_000_000).unwrap();
    let nr: Vec<usize> = (0..16).map(|c| s.nr_running(c)).collect();
    assert_eq!(nr.iter().sum::<usize>(), 32);
    assert!(nr.iter().all(|&n| n == 2), "balanced: {nr:?}");
}

#[test]
fn without_balancing_the_same_start_stays_on_one_socket() {
    let mut c = two_socket_smt(32);
    c.host.load_balance = false;
    let mut s = sim_of(&c);
    for t in 0..s.tasks.len() {
        s.tasks[t].cpu = 0;
    }
    s.step_until(900_000_000).unwrap();
    let nr: Vec<usize> = (0..16).map(|c| s.nr_running(c)).collect();
    assert!(nr[4..8].iter().chain(&nr[12..]).all(|&n| n == 0), "{nr:?}");
}

/// 1 socket × 2 cores × 2 threads (CPUs 0 and 2 share core 0; 1 and 3 core
/// 1), `v` vCPUs pinned round-robin, threads computing 1 ms per iteration.
fn smt_host(v: u32, speed: u32) -> SimConfig {
    SimConfig {
        duration_ns: 100_000_000,
        host: HostConfig {
            n_pcpus: 4,
            threads_per_core: 2,
            affinity: Affinity::RoundRobin,
            smt_speed_pct: speed,
            ..Default::default()
        },
        vms: vec![VmConfig {
            vcpus: v,
            policy: PolicyConfig { kind: PolicyKind::NoYield, ..Default::default() },
            workload: WorkloadConfig {
                phases: vec![Phase::Compute { ns: 1_000_000, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 }],
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn busy_smt_siblings_run_at_the_smt_speed_and_a_thread_alone_at_full_speed() {
    // v0 on CPU 0 and v2 on CPU 2 share core 0; v1 has core 1 to itself
    let mut s = sim_of(&smt_host(3, 65));
    s.step_until(100_000_000).unwrap();
    let iters: Vec<u64> = s.threads.iter().map(|t| t.iters).collect();
    assert!((64..=66).contains(&iters[0]) && (64..=66).contains(&iters[2]), "{iters:?}");
    assert!((99..=100).contains(&iters[1]), "{iters:?}");
    // off (100 %): every thread at full speed
    let mut s = sim_of(&smt_host(3, 100));
    s.step_until(100_000_000).unwrap();
    assert!(s.threads.iter().all(|t| (99..=100).contains(&t.iters)));
}

#[test]
fn a_sibling_going_idle_speeds_the_other_thread_up_at_once() {
    // v2 (CPU 2, sibling of v0's CPU 0) sleeps 5 ms after each 1 ms of work:
    // v0 runs at 65 % about a sixth of the time
    let mut c2 = smt_host(3, 65);
    c2.vms.push(VmConfig {
        vcpus: 1,
        policy: PolicyConfig { kind: PolicyKind::NoYield, ..Default::default() },
        workload: WorkloadConfig {
            phases: vec![
                Phase::Compute { ns: 1_000_000, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 },
                Phase::Sleep { ns: 5_000_000, dist: Dist::Fixed, prob: 1.0, periodic: false },
            ],
            ..Default::default()
        },
        ..Default::default()
    });
    c2.vms[0].vcpus = 2; // v0 on CPU 0, v1 on CPU 1; the sleeper's vCPU on CPU 2
    c2.vms[0].threads = 2;
    let mut s = sim_of(&c2);
    s.step_until(100_000_000).unwrap();
    let it0 = s.threads[0].iters;
    // all at 65 % would be ~65, all at full speed 100
    assert!((86..=97).contains(&it0), "{it0}");
    let r = super::super::run(&c2).unwrap();
    for i in 0..4 {
        assert_eq!(pcpu_time(&r, i), c2.duration_ns);
    }
}

/// The start CPU of every vCPU thread, in vCPU order.
fn start_cpus(c: &SimConfig) -> Vec<u32> {
    let s = sim_of(c);
    s.vcpus.iter().map(|v| s.tasks[v.task as usize].cpu).collect()
}

#[test]
fn start_placement_shuffled_gives_unpinned_vcpus_a_balanced_seeded_map_and_leaves_pinned_maps_alone() {
    // 3 VMs of 8 vCPUs on 16 CPUs: index puts VM 0 and VM 2 on CPUs 0..8
    let mut c = two_socket_smt(8);
    c.vms[0].count = 3;
    let index = start_cpus(&c);
    assert_eq!(index, (0..24).map(|g| g % 16).collect::<Vec<u32>>());
    c.host.start_placement = StartPlacement::Shuffled;
    let shuffled = start_cpus(&c);
    assert_ne!(shuffled, index);
    let mut per_cpu = [0u32; 16];
    for &cpu in &shuffled {
        per_cpu[cpu as usize] += 1;
    }
    assert!(per_cpu.iter().all(|&n| n == 1 || n == 2), "balanced: {per_cpu:?}");
    assert_eq!(per_cpu.iter().sum::<u32>(), 24);
    assert_eq!(start_cpus(&c), shuffled, "one map per seed");
    c.seed += 1;
    assert_ne!(start_cpus(&c), shuffled, "another seed, another map");
    // an explicit pinning is the user's: round robin stays g mod P
    c.host.affinity = Affinity::RoundRobin;
    assert_eq!(start_cpus(&c), index);
}

#[test]
fn a_new_vcpu_thread_starts_on_its_start_cpu_not_through_the_wake_up_path() {
    // wake_up_new_task places by fork balancing (find_idlest_cpu), which the
    // start map stands for. Through select_idle_sibling in index order the
    // first vCPUs took the idle CPUs and the last ones stacked on their
    // start CPU: 24 vCPUs on 16 CPUs came out 1, 2 or 3 per CPU.
    for gap in [0, 50_000] {
        let mut c = two_socket_smt(8);
        c.vms[0].count = 3;
        c.host.start_placement = StartPlacement::Shuffled;
        c.host.start_gap_ns = gap;
        let map = start_cpus(&c);
        let mut s = sim_of(&c);
        s.step_until(2_000_000).unwrap();
        let placed: Vec<u32> = s.vcpus.iter().map(|v| s.tasks[v.task as usize].cpu).collect();
        let moved = map.iter().zip(&placed).filter(|(a, b)| a != b).count();
        // the balancer may move a few in 2 ms; the start itself moves none
        let mut per_cpu = [0u32; 16];
        for &cpu in &placed {
            per_cpu[cpu as usize] += 1;
        }
        assert!(per_cpu.iter().all(|&n| n == 1 || n == 2), "gap {gap}: {per_cpu:?} (moved {moved})");
    }
}

#[test]
fn migration_cold_costs_nothing_on_the_same_core_the_core_cost_in_the_llc_and_the_llc_cost_across() {
    let mut c = two_socket_smt(4);
    assert_eq!(sim_of(&c).migration_cold(0, 5), 0, "off by default");
    c.host.migration_cold_core_ns = 10_000;
    c.host.migration_cold_llc_ns = 100_000;
    let mut s = sim_of(&c);
    assert_eq!(s.migration_cold(1, 1), 0);
    assert_eq!(s.migration_cold(1, 9), 0, "SMT siblings share L1/L2");
    assert_eq!(s.migration_cold(1, 2), 10_000);
    assert_eq!(s.migration_cold(1, 10), 10_000, "another core of the LLC, either thread");
    assert_eq!(s.migration_cold(1, 4), 100_000);
    assert_eq!(s.migration_cold(12, 3), 100_000);
    // sched-in on another socket owes the LLC cost
    s.vcpus[0].last_cpu = 4;
    s.vcpu_sched_in(0, 0);
    assert_eq!(s.vcpus[0].cold_ns, 100_000);
    // a debt still owed is not added up: the larger one stays
    let mut s = sim_of(&c);
    s.vcpus[0].last_cpu = 1;
    s.vcpus[0].cold_ns = 100_000;
    s.vcpu_sched_in(0, 2);
    assert_eq!(s.vcpus[0].cold_ns, 100_000);
}

#[test]
fn a_cold_debt_delays_the_next_useful_work_by_its_length_and_is_spent_once() {
    // v1 alone on core 1 computes 1 ms per iteration: ~100 in 100 ms
    let c = smt_host(2, 100);
    let mut s = sim_of(&c);
    s.step_until(100_000_000).unwrap();
    let base = s.threads[1].iters;
    assert!((99..=100).contains(&base), "{base}");
    let mut s = sim_of(&c);
    s.vcpus[1].cold_ns = 2_500_000;
    s.step_until(100_000_000).unwrap();
    let it = s.threads[1].iters;
    assert!(it == base - 3 || it == base - 2, "2.5 ms of refill, then full speed: {it} vs {base}");
    assert_eq!(s.vcpus[1].cold_ns, 0);
}

#[test]
fn record_wakee_counts_changes_of_wakee_and_halves_the_count_every_second() {
    let mut c = two_socket_smt(4);
    c.host.wake_wide = true;
    let mut s = sim_of(&c);
    let (w, a, b) = (s.vcpus[0].task, s.vcpus[1].task as usize, s.vcpus[2].task as usize);
    s.wake.waker_task = w;
    s.record_wakee(a);
    s.record_wakee(a);
    assert_eq!(s.tasks[w as usize].wakee.flips, 1, "the same wakee again: no flip");
    s.record_wakee(b);
    s.record_wakee(a);
    assert_eq!(s.tasks[w as usize].wakee.flips, 3);
    s.tasks[w as usize].wakee.flips = 40;
    s.now = 1_000_000_001;
    s.record_wakee(a);
    assert_eq!(s.tasks[w as usize].wakee.flips, 20, "halved after a second; a is the last wakee already");
    // off: nothing is counted
    let mut s = sim_of(&two_socket_smt(4));
    s.wake.waker_task = w;
    s.record_wakee(a);
    assert_eq!(s.tasks[w as usize].wakee.flips, 0);
}

#[test]
fn wake_wide_needs_both_flip_counts_at_the_llc_size_and_one_llc_size_times_the_other() {
    // LLC of 8 CPUs: factor 8
    let mut c = two_socket_smt(4);
    c.host.wake_wide = true;
    let mut s = sim_of(&c);
    let (w, t) = (s.vcpus[0].task as usize, s.vcpus[1].task as usize);
    s.wake.waker_task = w as u32;
    let mut flips = |waker: u32, wakee: u32| {
        s.tasks[w].wakee.flips = waker;
        s.tasks[t].wakee.flips = wakee;
        s.wake_wide(t, 0)
    };
    assert!(flips(64, 8), "64 >= 8 x 8 and 8 >= 8");
    assert!(flips(8, 64), "symmetric");
    assert!(!flips(63, 8), "63 < 8 x 8");
    assert!(!flips(1000, 7), "the smaller count under the LLC size");
    // wake-wide skips wake_affine: the wakee stays around its previous CPU
    s.tasks[w].wakee.flips = 64;
    s.tasks[t].wakee.flips = 8;
    s.tasks[t].cpu = 5; // socket 1, idle
    s.wake.waker_cpu = 0;
    busy(&mut s, &[5]);
    s.tasks[0].runnable = true; // CPU 5 carries a load of 1024: wake_affine_weight prefers the idle waker CPU
    let cpu = s.select_task_rq_fair(t);
    assert!(s.share_llc(cpu, 5), "wide: an idle CPU of the previous CPU's LLC, got {cpu}");
    s.tasks[w].wakee.flips = 0;
    let cpu = s.select_task_rq_fair(t);
    assert!(s.share_llc(cpu, 0), "affine: the waker's LLC (idle waker CPU), got {cpu}");
}
